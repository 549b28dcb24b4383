"""Every hook specification is documented in the required shape and is exercised by a run in this file;
the typing protocols are generated from the specs and up to date."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.hookspecs import spec_modules
from ember.hookspecs.reference import (
    PROTOCOL_FILES,
    SpecRecord,
    protocol_name,
    render_markdown,
    render_protocols,
    specs,
)
from ember.testing import HookRecorder, TinyClassifier, tiny_loaders

ALL_SPECS = specs()

#: Hooks nothing in ember calls yet: the features that call them are built in other pieces of work. Each entry
#: must leave this list as soon as something calls it (test_the_allow_list_only_holds_hooks_never_called fails
#: then, saying which entry to remove).
NOT_CALLED_YET = {
    # Agreement across processes (should_stop, early stopping, checkpoint monitors) calls this.
    "reduce_boolean_decision": "distributed strategies and monitoring callbacks",
    # Only the FSDP strategy asks it (multi-process runs in tests/test_fsdp.py; unit-tested in test_plugin_order.py).
    "mixed_precision_dtype": "strategies that cast parameters themselves",
}

#: Hooks called outside a run, so no run's recorder sees them; each names the test that checks the call.
CALLED_OUTSIDE_RUNS = {
    "add_options": "on plugin classes, by ember.core.hooks.options.declarations(): tests/test_options.py",
}


def _normalised(text: str) -> str:
    return " ".join(text.split())


# -- documentation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_every_spec_is_documented_in_the_required_shape(spec: SpecRecord) -> None:
    assert spec.summary and spec.summary.endswith((".", ")")), f"{spec.name}: no one-line summary"
    names = [p.name for p in spec.params]
    undocumented = [n for n in names if not spec.param_docs.get(n)]
    assert not undocumented, f"{spec.name}: no ':param <name>:' line for {undocumented}"
    stale = sorted(set(spec.param_docs) - set(names))
    assert not stale, f"{spec.name}: ':param:' for arguments it does not have: {stale}"
    if spec.firstresult:
        assert "Stops at first non-None result" in _normalised(spec.doc), \
            f"{spec.name} is firstresult: its docstring must say 'Stops at first non-None result'"
    assert all(p.annotation for p in spec.params) and spec.returns, f"{spec.name}: annotate every argument"
    if "trainer" in names:
        assert names[0] == "trainer", f"{spec.name}: 'trainer' comes first"


#: What a spec's ``:ranks:`` field may say (the contract for plugin authors, shown in docs/hooks.md).
RANKS = {"every rank", "global rank 0 only", "local rank 0 of each node; the other ranks wait at a barrier",
         "every process, before any process group exists",
         "every process, once per set of installed plugins, outside any run"}


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.name)
def test_every_spec_states_its_ranks_and_whether_it_may_be_wrapped(spec: SpecRecord) -> None:
    assert spec.ranks in RANKS, f"{spec.name}: ':ranks:' must be one of {sorted(RANKS)}, not {spec.ranks!r}"
    assert spec.wrap == "yes" or spec.wrap.startswith("no: "), \
        f"{spec.name}: ':wrap:' must be 'yes' or 'no: <why>', not {spec.wrap!r}"
    assert f"- runs on: {spec.ranks}" in render_markdown()



@pytest.mark.parametrize("module", spec_modules(), ids=lambda m: m.__name__)
def test_spec_arguments_can_be_passed_by_name(module) -> None:
    for name, function in vars(module).items():
        if hasattr(function, "ember_spec"):
            kinds = {p.kind for p in inspect.signature(function).parameters.values()}
            assert kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD}, name


@pytest.mark.parametrize("file", sorted(PROTOCOL_FILES))
def test_typing_protocols_are_generated_from_the_specs(file: str) -> None:
    path = Path(ember.__file__).parent / "hookspecs" / file
    assert path.read_text() == render_protocols(file), (
        f"ember/hookspecs/{file} is out of date: run `python -m ember.hookspecs.reference --protocols`")


def test_every_protocol_imports_from_one_module() -> None:
    from ember.hookspecs import protocols

    assert {protocol_name(s.name) for s in ALL_SPECS} | {"EventHooks"} == set(protocols.__all__)
    assert all(hasattr(protocols, name) for name in protocols.__all__)


def test_protocols_are_empty_at_run_time() -> None:
    from ember.hookspecs import protocols

    class Callback(protocols.EventHooks, protocols.OnTrainStart):
        pass

    assert ember.testing.check_plugin(Callback()) == []
    assert set(protocols.__all__) == {re.sub(r"(^|_)(\w)", lambda m: m.group(2).upper(), s.name)
                                      for s in ALL_SPECS} | {"EventHooks"}


# -- every spec is exercised ----------------------------------------------------------------------------------


def _probe() -> Any:
    """A plugin with a pass-through wrapper around every hook, so that every hook the loop reaches is called
    (a hook nobody implements is skipped) without changing what any hook does."""

    def make(name: str) -> Any:
        def wrapper(self: Any) -> Any:
            return (yield)

        wrapper.__name__ = name
        return ember.hookimpl(wrapper=True)(wrapper)

    return type("EveryHook", (), {s.name: make(s.name) for s in ALL_SPECS})()


class CollectivesUser(TinyClassifier):
    """Uses the collectives a module or plugin may call: all_gather, reduce, broadcast, barrier."""

    def on_train_epoch_end(self) -> None:
        gathered = self.all_gather(torch.ones(2))
        assert gathered.shape == (1, 2)
        assert self.trainer.reduce(torch.tensor(3.0), "sum") == 3.0
        assert self.trainer.broadcast({"a": 1}) == {"a": 1}
        self.trainer.barrier("epoch end")


class ManualOptimization(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        optimizer.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        optimizer.step()


class Fails(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        raise RuntimeError("failing on purpose")


class StopsOnASignal(TinyClassifier):
    """Asks for the orderly stop a SIGTERM causes: a checkpoint, the requeue hook, SignalExit."""

    def on_train_batch_start(self, batch_idx: int) -> None:
        from ember.core.loop.signals import request_stop

        request_stop(self.trainer, requeue=True)


class WithData(CollectivesUser):
    """Also a data source: prepare_data and the transfer hooks are hooks of the module."""

    def prepare_data(self) -> None:
        pass


def _runs(tmp_path: Path) -> list[str]:
    """Representative runs: fit (sanity check, clipping, logging), validate, test, predict, manual
    optimization, an exception, and 64-bit precision (which converts module and input)."""
    called: list[str] = []
    train, val = tiny_loaders(n=32)

    def trainer(**kwargs: Any) -> ember.Trainer:
        args = {"accelerator": "cpu", "max_epochs": 1, "num_sanity_val_steps": 1, "limit_train_batches": 2,
                "limit_val_batches": 1, "log_every_n_steps": 1, "default_root_dir": str(tmp_path),
                "plugins": [_probe()], **kwargs}
        t = ember.Trainer(**args)
        recorder = HookRecorder().attach(t)
        runs.append(recorder)
        return t

    runs: list[HookRecorder] = []
    t = trainer(gradient_clip_val=0.5)
    t.fit(WithData(), train, val)
    t.validate(dataloaders=val, verbose=False, ckpt_path="best")
    t.test(dataloaders=val, verbose=False, ckpt_path="best")
    t.predict(dataloaders=val, ckpt_path="best")
    trainer().fit(ManualOptimization(), train, val)
    with pytest.raises(RuntimeError, match="failing on purpose"):
        trainer().fit(Fails(), train, val)
    trainer(precision="64-true").fit(TinyClassifier(), train, val)
    # Checkpoints: two epochs (the default callback replaces its epoch file), a resume, a stop on a signal.
    checkpoints = str(tmp_path / "checkpointing")
    trainer(max_epochs=2, default_root_dir=checkpoints).fit(TinyClassifier(), train, val)
    trainer(max_epochs=3, default_root_dir=checkpoints).fit(TinyClassifier(), train, val, ckpt_path="last")
    from ember.core.loop.signals import SignalExit

    with pytest.raises(SignalExit):
        trainer(max_epochs=4, default_root_dir=checkpoints).fit(StopsOnASignal(), train, val)
    # ckpt_path="last" with no last checkpoint anywhere asks for a failed fit's checkpoint
    from ember.core.errors import NothingToResumeWarning

    with pytest.warns(NothingToResumeWarning):
        trainer(default_root_dir=str(tmp_path / "nothing_kept")).fit(TinyClassifier(), train, val, ckpt_path="last")
    for recorder in runs:
        called.extend(recorder.names)
    return called


@pytest.fixture(scope="module")
def called_hooks(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return set(_runs(tmp_path_factory.mktemp("runs")))


def test_every_spec_is_called_by_a_representative_run(called_hooks: set[str]) -> None:
    never = sorted({s.name for s in ALL_SPECS} - called_hooks - set(NOT_CALLED_YET) - set(CALLED_OUTSIDE_RUNS))
    assert not never, f"hooks no representative run calls: {never}; add a run that reaches them"


def test_the_allow_list_only_holds_hooks_never_called(called_hooks: set[str]) -> None:
    assert set(NOT_CALLED_YET) <= {s.name for s in ALL_SPECS}, "the allow-list names a hook that does not exist"
    now_called = sorted(set(NOT_CALLED_YET) & called_hooks)
    assert not now_called, f"remove {now_called} from NOT_CALLED_YET: a representative run calls them now"


def test_the_runs_call_hooks_with_their_spec_arguments(tmp_path: Path) -> None:
    # pluggy ignores a misspelled keyword in a call; check every call passes exactly the spec's arguments.
    t = ember.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                      num_sanity_val_steps=1, plugins=[_probe()], default_root_dir=str(tmp_path))
    recorder = HookRecorder().attach(t)
    t.fit(WithData(), *tiny_loaders(n=32))
    params = {s.name: [p.name for p in s.params] for s in ALL_SPECS}
    for (name, _), kwargs in zip(recorder.calls, recorder.kwargs, strict=True):
        assert sorted(kwargs) == sorted(params[name]), f"{name} called with {sorted(kwargs)}"


def test_plugin_authors_see_a_typed_trainer(tmp_path: Path) -> None:
    """Every hook's ``trainer`` is a TrainerLike, and a real Trainer is one (mypy checks the types statically)."""
    from ember.hookspecs import TrainerLike

    annotations = {p.annotation for spec in ALL_SPECS for p in spec.params if p.name == "trainer"}
    assert annotations <= {"TrainerLike", "TrainerLike | None"}, annotations
    seen: list[bool] = []

    class Check:
        def on_train_start(self, trainer: TrainerLike) -> None:
            seen.append(isinstance(trainer, TrainerLike) and trainer.world_size == 1 and trainer.global_step == 0)

    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=1, callbacks=[Check()], logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                            default_root_dir=str(tmp_path))
    trainer.fit(TinyClassifier(), tiny_loaders(n=8)[0])
    assert seen == [True]
    assert not isinstance(object(), TrainerLike)
