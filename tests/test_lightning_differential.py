"""ember's loop against Lightning 2.6's, scenario by scenario.

``tests/lightning/record_loop.py`` ran the scenarios of ``tests/lightning/scenarios.py`` on Lightning and wrote
what happened to ``tests/lightning/loop.json``: every hook call (callbacks' and the module's, with their
arguments' shapes, ``global_step`` and ``current_epoch``), the dicts ``validate()``/``test()`` returned,
``callback_metrics`` and ``logged_metrics`` after each run, the counters, ``trainer.state`` and the final
weights. Here the same scenarios run on ember and are compared with that file. Lightning is not needed.

Where ember differs on purpose, :data:`DELIBERATE` says so, with the reason; nothing else may differ.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import ember

sys.path.insert(0, str(Path(__file__).parent / "lightning"))
import project_runner  # noqa: E402
import scenarios  # noqa: E402

FIXTURE = json.loads((Path(__file__).parent / "lightning" / "loop.json").read_text())
#: Floats are compared bitwise where the fixture was recorded (the same torch on the same processor); elsewhere
#: another build's or processor's kernels may round the last bit of float32 differently.
EXACT = torch.__version__.split("+")[0] == FIXTURE["torch"].split("+")[0] and \
    FIXTURE.get("cpu") == project_runner.cpu_model()


def same(a: Any, b: Any) -> bool:
    """Equal; to float32 precision where :data:`EXACT` is False."""
    if EXACT:
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return bool(a == pytest.approx(b, rel=1e-5, abs=1e-7))
    return bool(a == b)
EMBER = scenarios.Framework("ember", ember.Trainer, ember.Module, object, ember.seed_everything)

#: (scenario, run index, field) -> why ember differs on purpose. The test checks the difference is still there
#: (so a fix shows up as a failure that asks to remove the entry).
DELIBERATE: dict[tuple[str, int, str], str] = {
    ("exception_in_training_step", 0, "state.status"):
        "ember's status after an exception is 'failed' ('interrupted' is kept for Ctrl-C and signals); Lightning "
        "says 'interrupted' for both. trainer.state.finished is False in both.",
}


#: Calls ember makes at other points than Lightning, with the reason; compared by count, not position. Empty:
#: the loaders are asked for where Lightning asks (configure_optimizers first, the validation loaders when
#: validation first runs, the training loader when training starts).
MOVED_CALLS: dict[str, str] = {}


def _in_place(calls: list[list[Any]]) -> list[list[Any]]:
    return [c for c in calls if c[0] not in MOVED_CALLS]


def _moved(calls: list[list[Any]]) -> Counter[str]:
    return Counter(c[0] for c in calls if c[0] in MOVED_CALLS)


@cache
def ember_run(name: str) -> dict[str, Any]:
    return json.loads(json.dumps(scenarios.run(EMBER, scenarios.SCENARIOS[name])))


def lightning_run(name: str) -> dict[str, Any]:
    return FIXTURE["scenarios"][name]


def _flat_state(run: dict[str, Any]) -> dict[str, Any]:
    return {f"state.{k}": v for k, v in run["state"].items()}


def _warned(run: dict[str, Any], word: str) -> bool:
    return any(word in w for w in run["warnings"])


@pytest.mark.parametrize("name", list(scenarios.SCENARIOS))
def test_scenario_matches_lightning(name: str) -> None:
    ours, theirs = ember_run(name), lightning_run(name)
    assert len(ours["runs"]) == len(theirs["runs"])
    for i, (a, b) in enumerate(zip(ours["runs"], theirs["runs"], strict=True)):
        where = f"{name} run {i} ({a['fn']})"
        # hook order, arguments' shapes, counters at each hook
        assert _in_place(a["calls"]) == _in_place(b["calls"]), where
        assert _moved(a["calls"]) == _moved(b["calls"]), where
        assert a.get("exception") == b.get("exception"), where
        assert same(a.get("returned"), b.get("returned")), where  # bitwise: the same floats (see EXACT)
        assert same(a["callback_metrics"], b["callback_metrics"]), where
        assert same(a["logged_metrics"], b["logged_metrics"]), where
        assert (a["global_step"], a["current_epoch"]) == (b["global_step"], b["current_epoch"]), where
        sa, sb = _flat_state(a), _flat_state(b)
        for key in sa:
            reason = DELIBERATE.get((name, i, key))
            if reason is None:
                assert sa[key] == sb[key], f"{where}: {key}"
            else:
                assert sa[key] != sb[key], f"{where}: {key} now matches Lightning; remove it from DELIBERATE"
    # the same model, data and seed: bitwise the same weights
    assert same(ours["weights"], theirs["weights"])
    # self.log(on_step=False, on_epoch=False) is refused by both (each with its own exception type)
    assert sorted(ours["log_errors"]) == sorted(theirs["log_errors"])


def test_the_comparison_sees_a_difference() -> None:
    """The fixture is not trivially equal to anything: a scenario's record differs from another's."""
    a, b = ember_run("max_steps_mid_epoch"), lightning_run("should_stop_mid_epoch")
    assert a["runs"][0]["calls"] != b["runs"][0]["calls"]
    assert ember_run("weights")["weights"] != lightning_run("max_steps_mid_epoch")["weights"]


# -- the behaviours the scenarios were written for, stated plainly ---------------------------------------------


def _names(run: dict[str, Any]) -> list[str]:
    return [call[0] for call in run["calls"]]


def test_after_an_exception_on_exception_runs_and_no_callback_or_module_teardown() -> None:
    run = ember_run("exception_in_training_step")["runs"][0]
    names = _names(run)
    assert names[-1] == "callback.on_exception"
    assert "callback.teardown" not in names and "module.teardown" not in names
    assert run["exception"] == "RuntimeError: boom in training_step"
    assert run["state"]["finished"] is False


def test_max_steps_mid_epoch_starts_no_validation() -> None:
    run = ember_run("max_steps_mid_epoch")["runs"][0]
    assert run["global_step"] == 3
    assert not any("validation" in n for n in _names(run))


def test_should_stop_mid_epoch_still_validates_that_epoch() -> None:
    run = ember_run("should_stop_mid_epoch")["runs"][0]
    names = _names(run)
    assert names.count("callback.on_validation_start") == 1
    assert names.index("callback.on_validation_start") < names.index("callback.on_train_epoch_end")
    assert run["global_step"] == 2


def test_training_step_returning_none_still_zeroes_and_steps() -> None:
    run = ember_run("training_step_returns_none")["runs"][0]
    assert run["global_step"] == 4  # four batches, one of them None: four optimizer steps
    calls = run["calls"]
    i = next(j for j, c in enumerate(calls) if c[0] == "module.training_step" and c[1]["batch_idx"] == 1)
    after = [c[0] for c in calls[i + 1:i + 7]]
    assert after == ["callback.on_before_zero_grad", "module.on_before_zero_grad",
                     "callback.on_before_optimizer_step", "module.on_before_optimizer_step",
                     "callback.on_train_batch_end", "module.on_train_batch_end"]
    assert calls[i + 5][1]["outputs"] == {}


def test_validation_data_without_validation_step_warns_and_skips() -> None:
    ours, theirs = ember_run("no_validation_step")["runs"][0], lightning_run("no_validation_step")["runs"][0]
    assert _warned(ours, "validation_step") and _warned(theirs, "validation_step")
    assert not any("validation" in n for n in _names(ours))


def test_metric_keys_for_every_on_step_on_epoch_combination_and_reset_per_run() -> None:
    fit, validate, test = ember_run("log_combinations")["runs"]
    assert set(fit["callback_metrics"]) >= {"train_s1_e1", "train_s1_e1_step", "train_s1_e1_epoch", "train_s1_e0",
                                            "train_s0_e1", "val_s1_e1", "val_s1_e1_epoch", "val_s0_e1"}
    assert "val_s1_e0" not in fit["callback_metrics"]  # an evaluation's step values leave with its epoch
    assert "val_s1_e0" in fit["logged_metrics"]
    assert validate["returned"][0].keys() == {"val_default", "val_s0_e1", "val_s1_e1_epoch", "validation_loss"}
    assert not any(k.startswith("train_") for k in validate["callback_metrics"])  # reset per run
    assert all(k.startswith("test_") for k in test["callback_metrics"])


def test_overfit_batches_warns_about_shuffling_and_trains_on_the_same_batches() -> None:
    ours, theirs = ember_run("overfit_batches"), lightning_run("overfit_batches")
    assert _warned(ours["runs"][0], "shuffl") and _warned(theirs["runs"][0], "shuffl")
    assert ours["runs"][0]["global_step"] == 4  # 2 batches x 2 epochs
    assert same(ours["weights"], theirs["weights"])


def test_reload_dataloaders_every_epoch_calls_the_methods_each_epoch() -> None:
    calls = ember_run("reload_dataloaders_every_epoch")["runs"][0]["calls"]
    loaders = Counter(c[0] for c in calls if c[0].endswith("_dataloader"))
    assert loaders == {"module.train_dataloader": 3, "module.val_dataloader": 3}
    # asked for where Lightning asks: the validation loaders in the sanity check, the training one after it
    names = _names(ember_run("reload_dataloaders_every_epoch")["runs"][0])
    assert names.index("callback.on_sanity_check_start") < names.index("module.val_dataloader") \
        < names.index("callback.on_sanity_check_end") < names.index("module.train_dataloader") \
        < names.index("callback.on_train_start")


def test_minus_one_ends_the_epoch_without_validation() -> None:
    run = ember_run("minus_one_from_on_train_batch_start")["runs"][0]
    assert run["global_step"] == 2 and run["current_epoch"] == 2  # batch 0 of each of 2 epochs
    assert not any("validation" in n for n in _names(run))
