"""Lightning-style projects run on ember with only their imports changed, compared with Lightning 2.6.

Each project under ``tests/lightning/projects/`` is one source text written against ``lightning`` (or
``pytorch_lightning``) imports, in the idioms public projects use: a GAN with manual optimization and toggled
optimizers, an autoencoder fed by a LightningDataModule with a plateau scheduler, early stopping and
checkpointing, a classifier logging torchmetrics objects and predicting with the default ``predict_step``, a
module owning its optimizer step, clipping and scheduler step, a stateful callback with a resumed fit, a
fine-tuning run with a CSV logger, a multi-dataloader DataModule, and bf16 mixed precision.
``tests/lightning/record_projects.py`` ran them on Lightning into ``tests/lightning/projects.json``; here the
same texts run on ember with only their import lines rewritten, and everything recorded must match: the
recorded hook calls (with ``global_step`` and ``current_epoch``), the metric dicts, the ``callback_metrics``,
the counters and the final weights, bitwise. :data:`DIFFERENCES` lists the hook-call details where ember
differs on purpose, with the reason; the test checks that each one is still there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.lightning as L

sys.path.insert(0, str(Path(__file__).parent / "lightning"))
import project_runner  # noqa: E402

FIXTURE = json.loads((Path(__file__).parent / "lightning" / "projects.json").read_text())


def test_every_project_is_recorded() -> None:
    assert sorted(FIXTURE["projects"]) == project_runner.NAMES


def test_only_import_lines_change() -> None:
    text = "import lightning as L\nfrom lightning.pytorch.callbacks import EarlyStopping\n" \
           "import pytorch_lightning as pl\nfrom pytorch_lightning import Callback\nx = 'lightning'\n"
    assert project_runner.to_ember(text) == (
        "import ember.lightning as L\nfrom ember.lightning.pytorch.callbacks import EarlyStopping\n"
        "import ember.lightning.pytorch as pl\nfrom ember.lightning.pytorch import Callback\nx = 'lightning'\n")
    for name in project_runner.NAMES:
        ported = project_runner.to_ember(project_runner.source(name))
        assert "import lightning" not in ported and "from lightning" not in ported, name
        assert "pytorch_lightning" not in ported, name


def _save_counted_once(calls: list[list[Any]]) -> list[list[Any]]:
    """``on_save_checkpoint`` without its epoch, and once per save (consecutive calls merged)."""
    out: list[list[Any]] = []
    for call in calls:
        if call[0] == "on_save_checkpoint":
            call = [call[0], call[1]]
            if out and out[-1] == call:
                continue
        out.append(call)
    return out


def _resume_counters_hidden(calls: list[list[Any]]) -> list[list[Any]]:
    """The counters of the calls from ``on_load_checkpoint`` to the resumed fit's ``on_train_start`` blanked."""
    out, hiding = [], False
    for call in calls:
        hiding = (hiding or call[0] == "on_load_checkpoint") and call[0] != "on_train_start"
        out.append([call[0], None, None, *call[3:]] if hiding else call)
    return out


#: How ember's recorded hook calls differ from Lightning's on purpose: (what, why, the view that hides it).
DIFFERENCES: list[tuple[str, str, Callable[[list[list[Any]]], list[list[Any]]]]] = [
    ("on_save_checkpoint sees the next epoch's index in trainer.current_epoch, and runs once when "
     "ModelCheckpoint(save_last=True) also writes last.ckpt",
     "a checkpoint requested during a fit is written at the loop's next safe point, after the epoch is "
     "counted, so that it resumes exactly (Lightning writes it inside on_train_epoch_end/on_validation_end); "
     "last.ckpt is written from the checkpoint just built, where Lightning builds it (and calls the hook) again",
     _save_counted_once),
    ("on_load_checkpoint and the hooks before on_train_start of a resumed fit see the restored counters",
     "ember restores global_step and current_epoch before on_load_checkpoint; Lightning restores them after "
     "on_fit_start and shows the sanity check the last finished epoch's index",
     _resume_counters_hidden),
]


#: Values returned by a project that may differ in the last bits, with why; compared to a relative 1e-6 (the
#: rest of "returned" is compared exactly).
ROUNDED: dict[tuple[str, str], str] = {
    ("finetune", "lr_logged"): "ember's LearningRateMonitor logs through trainer.log, which keeps values as "
    "float32 tensors like any self.log value; Lightning's hands the logger Python floats",
    ("multiloader", "validate"): "an epoch mean over batches: ember sums the batch values in float64, Lightning "
    "in float32, so the last bit of a mean over several batches may differ",
}


#: The weights are compared bitwise on the torch and the processor the fixture was recorded with: torch's CPU
#: kernels pick their vector code by processor, and one project's last bits differ between an Intel and an AMD
#: machine on the same torch (seen with warmup.py).
RECORDED_ON_THIS_TORCH = torch.__version__.split("+")[0] == FIXTURE["torch"].split("+")[0] and \
    FIXTURE.get("cpu") == project_runner.cpu_model()


def _comparable(calls: list[list[Any]]) -> list[list[Any]]:
    for _, _, view in DIFFERENCES:
        calls = view(calls)
    return calls


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, (int, float)) and not isinstance(b, bool):  # (pytest 9.2 refuses approx of a string)
        return bool(a == pytest.approx(b, rel=1e-6))
    return bool(a == b)


def _run(name: str, root: Path) -> dict[str, Any]:
    ported = project_runner.to_ember(project_runner.source(name))
    return json.loads(json.dumps(project_runner.run(name, ported, L.Callback, root)))


@pytest.mark.parametrize("name", project_runner.NAMES)
def test_project_matches_lightning(name: str, tmp_path: Path) -> None:
    ours, theirs = _run(name, tmp_path), FIXTURE["projects"][name]
    # bitwise where the fixture was recorded; elsewhere another build's or processor's kernels may round the last
    # bit of float32 differently: the same values to float32 precision
    same: Callable[[Any, Any], bool] = (lambda a, b: a == b) if RECORDED_ON_THIS_TORCH else _close
    for field in ("global_step", "current_epoch", "status"):
        assert ours[field] == theirs[field], f"{name}: {field}"
    assert same(ours["callback_metrics"], theirs["callback_metrics"]), f"{name}: callback_metrics"
    for key, value in theirs["returned"].items():
        if (name, key) in ROUNDED:
            if RECORDED_ON_THIS_TORCH:
                assert ours["returned"][key] != value, f"now equal: remove {(name, key)} from ROUNDED"
            assert _close(ours["returned"][key], value), f"{name}: {key}"
        else:
            assert same(ours["returned"][key], value), f"{name}: {key}"
    assert sorted(ours["returned"]) == sorted(theirs["returned"])
    assert _comparable(ours["calls"]) == _comparable(theirs["calls"]), f"{name}: hook calls"
    assert same(ours["weights"], theirs["weights"]), f"{name}: final weights differ"


def test_differences_are_still_there(tmp_path: Path) -> None:
    """Each listed difference still shows in a recorded project (a fix must remove its entry and its view)."""
    ours, theirs = _run("resume", tmp_path)["calls"], FIXTURE["projects"]["resume"]["calls"]
    for what, _, view in DIFFERENCES:
        others = [v for _, _, v in DIFFERENCES if v is not view]
        a, b = ours, theirs
        for other in others:
            a, b = other(a), other(b)
        assert a != b, f"no longer differs (remove it from DIFFERENCES and docs/lightning.md): {what}"
