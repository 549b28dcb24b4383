"""``strategy="ddp_spawn"`` (and ``ddp_fork``/``ddp_notebook``): processes started from inside ``fit``, each in a
real gloo process group, with rank 0's results brought back to the calling process.

Each spawned process imports torch and ember (seconds each): the tests that start processes are few, marked slow,
and each runs several entry points of one trainer."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.errors import ConfigurationError, WorkerFailedError
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.strategies.ddp import DDPStrategy
from ember.plugins.strategies.ddp_spawn import DDPForkStrategy, DDPNotebookStrategy, DDPSpawnStrategy
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


class RankLogging(TinyClassifier):
    """Logs what only a real group of two can give: the world size and the highest rank over the group."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        self.log("world", float(self.trainer.world_size))
        self.log("top_rank", float(self.trainer.global_rank), reduce_fx="max", sync_dist=True, on_step=False,
                 on_epoch=True)
        return loss


class FailsOnRankOne(TinyClassifier):
    """Rank 1 raises at its second batch; rank 0 goes on and waits for it in the next gradient exchange."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.trainer.global_rank == 1 and batch_idx == 1:
            raise ValueError("rank one gave up at batch 1")
        return super().training_step(batch, batch_idx)


class Sleeps(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        time.sleep(600)
        return super().training_step(batch, batch_idx)


class ExceptionCounter(ember.Callback):
    def __init__(self) -> None:
        self.exceptions = 0

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.exceptions += 1


def _loader() -> DataLoader:
    return DataLoader(tiny_dataset(32), batch_size=4)


# -- selection (no processes started) -------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "cls", "method"), [("ddp_spawn", DDPSpawnStrategy, "spawn"),
                                                     ("ddp_fork", DDPForkStrategy, "fork"),
                                                     ("ddp_notebook", DDPNotebookStrategy, "fork")])
def test_lightning_names_select_the_spawning_strategies(name: str, cls: type, method: str) -> None:
    trainer = ember.Trainer(strategy=name, devices=2, **QUIET)
    assert type(trainer.strategy) is cls and isinstance(trainer.strategy, DDPStrategy)
    assert trainer.strategy.start_method == method
    assert trainer.role_identities["strategy"] == f"strategy.{name}"


def test_lightning_ddp_strategy_start_method_selects_the_spawning_strategy() -> None:
    from ember.lightning.pytorch.strategies import DDPStrategy as LightningDDP

    spawn = LightningDDP(start_method="spawn", find_unused_parameters=True)
    assert type(spawn.plugin) is DDPSpawnStrategy and spawn.plugin.start_method == "spawn"
    assert spawn.plugin.ddp_kwargs == {"find_unused_parameters": True}
    assert type(LightningDDP().plugin) is DDPStrategy
    with pytest.raises(ConfigurationError, match="start_method='thread'"):
        LightningDDP(start_method="thread")


def test_an_unpicklable_model_is_named_with_the_fix() -> None:
    class LocalModel(TinyClassifier):  # a class inside a function cannot be pickled
        pass

    trainer = ember.Trainer(strategy="ddp_spawn", devices=2, max_epochs=1, enable_checkpointing=False, **QUIET)
    with pytest.raises(ConfigurationError, match=r"sends the model \(LocalModel\).*cannot be pickled.*module level"):
        trainer.fit(LocalModel(), _loader())


def test_an_unpicklable_callback_is_named() -> None:
    class Holder(ember.Callback):
        def __init__(self) -> None:
            self.fn = lambda x: x

    trainer = ember.Trainer(strategy="ddp_spawn", devices=2, max_epochs=1, enable_checkpointing=False,
                            callbacks=[Holder()], **QUIET)
    with pytest.raises(ConfigurationError, match=r"sends Trainer\(callbacks=\.\.\.\) \(Holder\)"):
        trainer.fit(TinyClassifier(), _loader())


def test_several_nodes_are_refused() -> None:
    trainer = ember.Trainer(strategy="ddp_spawn", devices=2, num_nodes=2, max_epochs=1, **QUIET)
    with pytest.raises(ConfigurationError, match="num_nodes=2.*this machine only"):
        trainer.fit(TinyClassifier(), _loader())


def test_under_a_launcher_it_says_to_use_ddp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_PORT", "29999")
    trainer = ember.Trainer(strategy="ddp_spawn", devices=2, max_epochs=1, **QUIET)
    with pytest.raises(ConfigurationError, match="already one of a job.*strategy='ddp'"):
        trainer.fit(TinyClassifier(), _loader())


# -- real processes -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_fit_in_spawned_processes_brings_rank_zero_back(tmp_path: Any) -> None:
    model = RankLogging()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True)
    trainer = ember.Trainer(strategy="ddp_spawn", devices=2, max_epochs=1, limit_train_batches=2,
                            limit_val_batches=2, num_sanity_val_steps=0, callbacks=[checkpoint],
                            default_root_dir=tmp_path, **QUIET)
    trainer.fit(model, _loader(), _loader())
    # the trained weights are in the caller's module, and they are those of the run's last checkpoint
    last = torch.load(checkpoint.last_model_path, weights_only=True)["state_dict"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in last.items())
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())
    # metrics of a real group of two: rank 0 sees rank 1 through the group
    assert trainer.callback_metrics["world"].item() == 2.0
    assert trainer.callback_metrics["top_rank"].item() == 1.0
    assert "val_loss" in trainer.logged_metrics
    assert os.path.isfile(checkpoint.best_model_path) and checkpoint.best_model_score is not None
    assert trainer.state.fn == "fit" and trainer.state.finished and trainer.state.stage is None
    # validate and predict bring back what they return the same way: under ddp_fork below (no imports to pay)


@pytest.mark.slow
@pytest.mark.extended  # two more spawned processes; a failing rank under `ddp` is in every run (tests/test_launch.py)
def test_a_failing_rank_fails_the_call_with_its_traceback_and_stops_the_others() -> None:
    counter = ExceptionCounter()  # the calling process's copy: on_exception runs there once
    trainer = ember.Trainer(strategy=DDPSpawnStrategy(kill_timeout=2), devices=2, max_epochs=1,
                            limit_train_batches=4, enable_checkpointing=False, callbacks=[counter], **QUIET)
    started = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        trainer.fit(FailsOnRankOne(), _loader())
    err = info.value
    assert isinstance(err, torch.multiprocessing.ProcessRaisedException)
    assert err.rank == 1 and err.error == "ValueError: rank one gave up at batch 1"
    assert "Traceback from rank 1" in str(err) and "training_step" in err.remote_traceback
    assert time.monotonic() - started < 120
    import multiprocessing

    assert multiprocessing.active_children() == []  # rank 0, stuck in a collective, was stopped
    assert counter.exceptions == 1 and trainer.state.status == "failed"


@pytest.mark.slow
def test_fork_takes_objects_that_cannot_be_pickled_and_an_interrupt_stops_the_processes() -> None:
    class LocalModel(TinyClassifier):  # fine under fork: nothing is pickled
        pass

    model = LocalModel()
    trainer = ember.Trainer(strategy="ddp_fork", devices=2, max_epochs=1, limit_train_batches=2,
                            enable_checkpointing=False, **QUIET)
    start = [p.clone() for p in model.parameters()]
    trainer.fit(model, _loader())
    assert any(not torch.equal(a, b) for a, b in zip(start, model.parameters()))
    assert trainer.callback_metrics["train_loss"].isfinite()
    results = trainer.validate(model, _loader(), ckpt_path=None, verbose=False)
    assert set(results[0]) >= {"val_loss", "val_acc"} and trainer.state.fn == "validate"
    assert trainer.callback_metrics["val_loss"].item() == pytest.approx(results[0]["val_loss"])
    # as in Lightning: the predictions stay in the processes
    assert trainer.predict(model, _loader(), ckpt_path=None) is None

    # Ctrl-C in the caller while the processes run: they are stopped (SIGTERM, then SIGKILL), none is left
    trainer = ember.Trainer(strategy=DDPForkStrategy(kill_timeout=1), devices=1, max_epochs=1,
                            enable_checkpointing=False, **QUIET)
    def ctrl_c(*_: Any) -> None:  # what Python makes of a Ctrl-C; a pytest-xdist worker ignores SIGINT itself
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, ctrl_c)
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)
        with pytest.raises(KeyboardInterrupt):
            trainer.fit(Sleeps(), _loader())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    import multiprocessing

    assert multiprocessing.active_children() == []
    assert trainer.state.status == "interrupted"


def test_lightning_classes_count_the_ember_plugins_chosen_by_name() -> None:
    from ember.lightning.pytorch.accelerators import CPUAccelerator
    from ember.lightning.pytorch.strategies import DDPStrategy as LightningDDP
    from ember.lightning.pytorch.strategies import FSDPStrategy, SingleDeviceStrategy

    spawn = ember.Trainer(strategy="ddp_spawn", devices=1, **QUIET)
    assert isinstance(spawn.strategy, LightningDDP) and isinstance(spawn.accelerator, CPUAccelerator)
    assert not isinstance(spawn.strategy, (FSDPStrategy, SingleDeviceStrategy))
    assert isinstance(ember.Trainer(**QUIET).strategy, SingleDeviceStrategy)

    class MyDDP(LightningDDP):  # a user's subclass counts only its own instances
        pass

    assert not isinstance(spawn.strategy, MyDDP)


class InfiniteLossAtBatchFour(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return loss * float("inf") if batch_idx == 4 else loss * 0 + 1 / (batch_idx + 1)


@pytest.mark.parametrize("finite_only", [True, False])
def test_spike_detection_counts_an_infinite_loss_as_a_spike_either_way(finite_only: bool, tmp_path: Any) -> None:
    # test_spike.py of Lightning's suite runs this under ddp_spawn; with finite_only=False, +inf takes the usual
    # test (it is far above the running mean), as in Lightning
    from ember.lightning.pytorch.callbacks.monitors import SpikeDetection, TrainingSpikeException

    trainer = ember.Trainer(max_epochs=1, callbacks=[SpikeDetection(exclude_batches_path=tmp_path,
                                                                    finite_only=finite_only)],
                            enable_checkpointing=False, **QUIET)
    with pytest.raises(TrainingSpikeException):
        trainer.fit(InfiniteLossAtBatchFour(), _loader())
