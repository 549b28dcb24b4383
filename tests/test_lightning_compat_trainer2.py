"""Trainer behaviours that follow Lightning 2.6 (found by Lightning's ``trainer/test_trainer.py``): the warnings at
the moments Lightning gives them, the checkpoint a run uses when none is named, what ``trainer.strategy``/
``trainer.accelerator`` are instances of, pickling a Trainer, and the attributes user code reads."""

from __future__ import annotations

import contextlib
import functools
import pickle
import threading
import warnings
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.errors import ConfigurationError, PossibleUserWarning
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False}


@contextlib.contextmanager
def no_warnings() -> Iterator[None]:
    """Any warning is an error, except the one that depends on the machine (a loader with few workers)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*does not have many workers")
        yield


def loader(batches: int, batch_size: int = 2) -> DataLoader:
    return DataLoader(tiny_dataset(n=batches * batch_size), batch_size=batch_size)


class LogsLoss(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))


def fitted(tmp_path: Path, **kwargs: Any) -> tuple[ember.Trainer, LogsLoss, Any]:
    from ember.lightning.pytorch.callbacks import ModelCheckpoint

    checkpoint = kwargs.pop("checkpoint", None) or ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val_loss")
    trainer = ember.Trainer(**{**QUIET, "enable_checkpointing": True, "max_epochs": 1, "default_root_dir": tmp_path,
                               "callbacks": [checkpoint, *kwargs.pop("callbacks", [])], **kwargs})
    model = LogsLoss()
    trainer.fit(model, loader(4), loader(2))
    return trainer, model, checkpoint


# -- the checkpoint an evaluation uses ---------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_evaluating_after_a_fit_without_a_model_warns_that_the_best_checkpoint_is_used(tmp_path: Path,
                                                                                      fn: str) -> None:
    trainer, model, checkpoint = fitted(tmp_path)
    model.test_step = model.validation_step  # type: ignore[method-assign]
    with pytest.warns(UserWarning, match=r"The best model of the previous `fit` call will be used") as caught:
        getattr(trainer, fn)(dataloaders=loader(2))
    assert checkpoint.best_model_path in str(caught[0].message) and f"trainer.{fn}()" in str(caught[0].message)
    assert trainer.ckpt_path == checkpoint.best_model_path
    with no_warnings():
        getattr(trainer, fn)(dataloaders=loader(2), ckpt_path="best")  # a value chosen: no warning
        getattr(trainer, fn)(model, dataloaders=loader(2))  # a model given: its weights, no warning
    assert trainer.ckpt_path is None


def test_ckpt_path_last_without_a_last_checkpoint_warns_and_loads_nothing(tmp_path: Path) -> None:
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, "default_root_dir": tmp_path})
    with pytest.warns(UserWarning, match="No checkpoint will be loaded: the fit starts from the beginning"):
        trainer.fit(TinyClassifier(), loader(2), ckpt_path="last")
    assert trainer.ckpt_path is None and trainer.global_step == 2
    with pytest.warns(UserWarning, match="No checkpoint will be loaded: the model is evaluated"):
        trainer.validate(dataloaders=loader(2), ckpt_path="last")
    assert trainer.ckpt_path is None


def test_best_with_several_checkpoint_callbacks_names_the_first(tmp_path: Path) -> None:
    from ember.lightning.pytorch.callbacks import ModelCheckpoint

    second = ModelCheckpoint(dirpath=tmp_path / "other", monitor="val_loss", mode="max")
    trainer, _, first = fitted(tmp_path, callbacks=[second])
    with pytest.warns(UserWarning, match="uses the best checkpoint path from first checkpoint callback"):
        trainer.validate(dataloaders=loader(2), ckpt_path="best")
    assert trainer.ckpt_path == first.best_model_path != second.best_model_path


def test_a_checkpoint_loads_from_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    model = TinyClassifier()
    trainer = ember.Trainer(**{**QUIET, "max_steps": 1, "default_root_dir": tmp_path})
    trainer.fit(model, loader(2))
    trainer.save_checkpoint(tmp_path / "served" / "weights.ckpt")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    with ThreadingHTTPServer(("localhost", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            host, port = server.server_address[:2]
            loaded = TinyClassifier.load_from_checkpoint(f"http://{host!s}:{port}/weights.ckpt")
        finally:
            server.shutdown()
            thread.join()
    for a, b in zip(model.parameters(), loaded.parameters(), strict=True):
        assert torch.equal(a, b)
    assert (tmp_path / "torch_home" / "hub" / "checkpoints" / "weights.ckpt").is_file()  # downloaded once, cached


class Stateful(ember.Callback):
    def state_dict(self) -> dict:
        return {"seen": 1}

    def load_state_dict(self, state: dict) -> None:
        pass


def test_resuming_without_a_callback_that_saved_state_warns(tmp_path: Path) -> None:
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, "default_root_dir": tmp_path, "callbacks": [Stateful()]})
    trainer.fit(TinyClassifier(), loader(2))
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    with no_warnings():  # the same callbacks: nothing to say
        ember.Trainer(**{**QUIET, "max_epochs": 2, "callbacks": [Stateful()]}).fit(
            TinyClassifier(), loader(2), ckpt_path=tmp_path / "a.ckpt")
    with pytest.warns(UserWarning, match=r"holds the state of callback\.Stateful, which this Trainer does not have"):
        ember.Trainer(**{**QUIET, "max_epochs": 2}).fit(TinyClassifier(), loader(2), ckpt_path=tmp_path / "a.ckpt")


# -- what trainer.strategy and trainer.accelerator are ------------------------------------------------------
def test_lightning_classes_match_the_plugins_behind_trainer_strategy_and_accelerator() -> None:
    from ember.lightning.pytorch.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
    from ember.lightning.pytorch.strategies import (
        DDPStrategy,
        FSDPStrategy,
        ParallelStrategy,
        SingleDeviceStrategy,
        Strategy,
    )

    trainer = ember.Trainer(**QUIET)
    assert isinstance(trainer.strategy, SingleDeviceStrategy) and isinstance(trainer.strategy, Strategy)
    assert not isinstance(trainer.strategy, (DDPStrategy, ParallelStrategy))
    assert isinstance(trainer.accelerator, CPUAccelerator) and isinstance(trainer.accelerator, Accelerator)
    assert not isinstance(trainer.accelerator, CUDAAccelerator)
    ddp = ember.Trainer(**{**QUIET, "strategy": "ddp", "devices": 2}).strategy
    assert isinstance(ddp, DDPStrategy) and isinstance(ddp, ParallelStrategy) and not isinstance(ddp, FSDPStrategy)

    class MyStrategy(SingleDeviceStrategy):  # a user's subclass claims its own instances only
        pass

    assert not isinstance(trainer.strategy, MyStrategy) and isinstance(MyStrategy(), SingleDeviceStrategy)


# -- errors --------------------------------------------------------------------------------------------------
def test_an_unknown_argument_reads_as_pythons_error_in_a_subclass() -> None:
    class MyTrainer(ember.Trainer):
        def __init__(self, **kwargs: Any) -> None:
            self.custom = kwargs.pop("custom", 0)
            super().__init__(**kwargs)

    with pytest.raises(TypeError, match=r"__init__\(\) got an unexpected keyword argument 'abcdefg'"):
        MyTrainer(abcdefg=1)


def test_save_checkpoint_before_any_run_is_an_attribute_error_too(tmp_path: Path) -> None:
    with pytest.raises(AttributeError, match="Saving a checkpoint is only possible if a model is attached") as info:
        ember.Trainer(**QUIET).save_checkpoint(tmp_path / "x.ckpt")
    assert isinstance(info.value, ConfigurationError)


# -- max_epochs ----------------------------------------------------------------------------------------------
def test_max_epochs_reads_as_given_until_a_fit_which_warns_and_runs_1000() -> None:
    trainer = ember.Trainer(**{**QUIET, "limit_train_batches": 1})
    assert trainer.max_epochs is None

    class StopsAtOnce(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

    with pytest.warns(PossibleUserWarning, match=r"`max_epochs` was not set\. Setting it to 1000 epochs"):
        trainer.fit(StopsAtOnce(), loader(2))
    assert trainer.max_epochs == 1000 and trainer.current_epoch == 1
    assert ember.Trainer(**{**QUIET, "max_epochs": -1}).max_epochs == -1
    assert ember.Trainer(**{**QUIET, "fast_dev_run": True}).max_epochs == 1


def test_a_step_budget_alone_sets_no_epoch_limit_and_no_warning() -> None:
    trainer = ember.Trainer(**{**QUIET, "limit_train_batches": 1, "max_steps": 3})
    assert trainer.max_epochs is None and trainer.estimated_stepping_batches == 3
    with no_warnings():
        trainer.fit(TinyClassifier(), loader(2))
    assert trainer.max_epochs == -1 and trainer.global_step == 3


# -- pickling ------------------------------------------------------------------------------------------------
def test_a_trainer_pickles_before_and_after_a_run() -> None:
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, "block_plugins": ["callback.timer"]})
    copy = pickle.loads(pickle.dumps(trainer))
    assert copy.config == trainer.config and copy.plugin_manager.is_blocked("callback.timer")
    copy.fit(TinyClassifier(), loader(3))
    again = pickle.loads(pickle.dumps(copy))
    assert again.global_step == 3 and again.max_epochs == 1
    again.fit(TinyClassifier(), loader(3))  # the copy runs
    assert again.global_step == 3


def test_pickling_during_a_run_says_when_it_can() -> None:
    class Pickles(TinyClassifier):
        def on_train_start(self) -> None:
            pickle.dumps(self.trainer)

    with pytest.raises(TypeError, match="pickle it before or after fit"):
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(Pickles(), loader(2))


# -- configure_optimizers ------------------------------------------------------------------------------------
class Configured(TinyClassifier):
    def __init__(self, configure: Any) -> None:
        super().__init__()
        self.configure = configure

    def configure_optimizers(self) -> Any:
        return self.configure(torch.optim.SGD(self.parameters(), lr=0.1))


def test_unknown_keys_of_an_optimizer_dict_are_ignored_with_a_warning() -> None:
    model = Configured(lambda opt: {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                    "foo": 1, "lr_schedular": 2})
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1})
    with pytest.warns(RuntimeWarning, match=r"Found unsupported keys in the optimizer configuration: \{.+\}.*"
                                            r"Did you mean 'lr_scheduler'\?"):
        trainer.fit(model, loader(2))
    assert len(trainer.lr_scheduler_configs) == 1 and trainer.global_step == 2


def test_one_cycle_stepped_per_epoch_warns() -> None:
    model = Configured(lambda opt: {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.1, total_steps=4)})
    with pytest.warns(RuntimeWarning, match="Are you sure you didn't mean 'interval': 'step'?"):
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(model, loader(2))


def test_plateau_with_strict_false_warns_when_its_metric_is_missing() -> None:
    model = Configured(lambda opt: {"optimizer": opt, "lr_scheduler": {
        "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "monitor": "giraffe", "strict": False}})
    with mock.patch.object(torch.optim.lr_scheduler.ReduceLROnPlateau, "step") as step, \
            pytest.warns(RuntimeWarning, match="conditioned on metric 'giraffe' which is not available but strict"):
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(model, loader(2))
    step.assert_not_called()


# -- eval mode -----------------------------------------------------------------------------------------------
def test_a_submodule_left_in_eval_mode_is_named_at_the_start_of_training() -> None:
    model = TinyClassifier()
    model.frozen = torch.nn.Linear(2, 2).eval()
    with pytest.warns(PossibleUserWarning, match=r"Found 1 module\(s\) in eval mode at the start of training "
                                                 r"\(frozen\)"):
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(model, loader(2))
    assert not model.frozen.training and model.training  # as the warning says: it stays in eval mode
    with no_warnings():
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(TinyClassifier(), loader(2))


# -- attributes user code reads ------------------------------------------------------------------------------
def test_profiler_is_a_no_op_without_one_and_a_pass_through_profiler_for_lightning() -> None:
    from ember.lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler

    trainer = ember.Trainer(**QUIET)
    with trainer.profiler.profile("my block") as name:
        assert name == "my block"
    assert isinstance(trainer.profiler, PassThroughProfiler) and trainer.profiler.summary() == ""
    profiler = SimpleProfiler()
    assert ember.Trainer(**{**QUIET, "profiler": profiler}).profiler is profiler


@pytest.mark.parametrize(("interval", "expected"), [(0.5, 2), (3, 3), (1.0, 4), (0.1, 1)])
def test_val_check_batch(interval: float, expected: int) -> None:
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, "val_check_interval": interval})
    assert trainer.val_check_batch == (interval if isinstance(interval, int) else float("inf"))  # before the fit
    trainer.fit(TinyClassifier(), loader(4), loader(1))
    assert trainer.val_check_batch == expected


def test_local_and_node_rank_are_properties_of_the_class() -> None:
    trainer = ember.Trainer(**QUIET)
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank, trainer.world_size) == (0, 0, 0, 1)
    with mock.patch.object(ember.Trainer, "local_rank", new_callable=mock.PropertyMock) as local_rank:
        local_rank.return_value = 1
        assert trainer.local_rank == 1
    assert trainer.local_rank == 0
    with mock.patch.object(ember.Trainer, "node_rank", new_callable=mock.PropertyMock, return_value=2):
        assert trainer.node_rank == 2


# -- data ----------------------------------------------------------------------------------------------------
def test_a_loader_without_workers_is_named_when_cpus_are_free() -> None:
    few = DataLoader(tiny_dataset(n=8), batch_size=4)
    many = DataLoader(tiny_dataset(n=8), batch_size=4, num_workers=2)
    with mock.patch("ember.core.loop.data.available_cpus", return_value=8), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(TinyClassifier(), few, many)
    messages = [str(w.message) for w in caught if issubclass(w.category, PossibleUserWarning)]
    assert any("The 'train_dataloader' does not have many workers" in m and "num_workers=7" in m for m in messages)
    assert not any("'val_dataloader'" in m for m in messages)
    with mock.patch("ember.core.loop.data.available_cpus", return_value=2), no_warnings():  # no CPU to spare
        ember.Trainer(**{**QUIET, "max_epochs": 1}).fit(TinyClassifier(), few)


def test_a_loader_shorter_than_the_logging_interval_warns_with_a_logger(tmp_path: Path) -> None:
    from ember.lightning.pytorch.loggers import CSVLogger

    trainer = ember.Trainer(**{**QUIET, "max_epochs": 1, "log_every_n_steps": 5, "logger": CSVLogger(tmp_path)})
    with pytest.warns(PossibleUserWarning, match=r"The number of training batches \(3\) is smaller than the "
                                                 r"logging interval Trainer\(log_every_n_steps=5\)"):
        trainer.fit(TinyClassifier(), loader(3))
    with no_warnings():  # without a logger, nothing is logged anyway
        ember.Trainer(**{**QUIET, "max_epochs": 1, "log_every_n_steps": 5}).fit(TinyClassifier(), loader(3))


def test_overfit_batches_names_the_shuffling_it_turns_off() -> None:
    shuffled = DataLoader(tiny_dataset(n=8), batch_size=2, shuffle=True)
    with pytest.warns(UserWarning, match="You requested to overfit but enabled train dataloader shuffling"):
        ember.Trainer(**{**QUIET, "max_epochs": 1, "overfit_batches": 2}).fit(TinyClassifier(), shuffled)


def test_lightning_tuner_skips_its_searches_under_fast_dev_run() -> None:
    from ember.lightning.pytorch.tuner import Tuner

    class Tunable(TinyClassifier):
        lr = 0.1
        batch_size = 2

        def train_dataloader(self) -> DataLoader:
            return loader(4, self.batch_size)

    model = Tunable()
    tuner = Tuner(ember.Trainer(**{**QUIET, "fast_dev_run": True}))
    with pytest.warns(UserWarning, match="Skipping learning rate finder since `fast_dev_run` is enabled"):
        assert tuner.lr_find(model) is None
    with pytest.warns(UserWarning, match="Skipping batch size scaler since `fast_dev_run` is enabled"):
        assert tuner.scale_batch_size(model) is None
    assert (model.lr, model.batch_size) == (0.1, 2)
