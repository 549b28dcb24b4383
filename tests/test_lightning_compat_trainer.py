"""Trainer behaviours that follow Lightning 2.6: environment defaults, time-based validation, barebones, and the
checks and messages code written for Lightning relies on."""

from __future__ import annotations

import datetime
import logging
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False}


def loader(batches: int, batch_size: int = 2) -> DataLoader:
    return DataLoader(tiny_dataset(n=batches * batch_size), batch_size=batch_size)


class CountsValidation(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.validations: list[tuple[int, int]] = []  # (epoch, global step) at each validation in the fit

    def on_validation_epoch_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.validations.append((self.trainer.current_epoch, self.trainer.global_step))


# -- PL_TRAINER_<NAME> ---------------------------------------------------------------------------------------
def test_environment_variables_give_defaults_and_passed_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", "/tmp/not a literal")
    monkeypatch.setenv("PL_TRAINER_LIMIT_VAL_BATCHES", "")  # empty: not set
    trainer = ember.Trainer(accelerator="cpu")
    assert trainer.max_steps == 7 and trainer.loggers == []
    assert trainer.config.default_root_dir == "/tmp/not a literal"
    assert trainer.config.limit_val_batches is None
    trainer = ember.Trainer(accelerator="cpu", max_steps=42, logger=False)
    assert trainer.max_steps == 42


def test_an_invalid_environment_default_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "-5")
    with pytest.raises(ember.ConfigurationError, match="max_steps"):
        ember.Trainer(accelerator="cpu")


# -- time-based val_check_interval ---------------------------------------------------------------------------
@pytest.mark.parametrize("interval", ["00:00:00:02", {"seconds": 2}, datetime.timedelta(seconds=2)])
def test_time_based_val_check_interval_validates_when_the_time_has_passed(interval: Any) -> None:
    clock = iter(range(0, 10_000, 2))  # each reading of the clock: 2 seconds later
    model = CountsValidation()
    with mock.patch("time.monotonic", side_effect=lambda: next(clock)):
        trainer = ember.Trainer(max_epochs=1, max_steps=5, limit_val_batches=1, num_sanity_val_steps=0,
                                val_check_interval=interval, **QUIET)
        trainer.fit(model, loader(8), loader(2))
    assert model.validations == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]


def test_time_based_val_check_interval_not_yet_due_skips_the_epoch_end() -> None:
    model = CountsValidation()
    trainer = ember.Trainer(max_epochs=2, limit_val_batches=1, num_sanity_val_steps=0,
                            val_check_interval="01:00:00:00", **QUIET)
    trainer.fit(model, loader(3), loader(2))
    assert model.validations == []


def test_time_based_val_check_interval_respects_check_val_every_n_epoch() -> None:
    clock = iter(range(10_000))  # one second per reading
    model = CountsValidation()
    with mock.patch("time.monotonic", side_effect=lambda: next(clock)):
        trainer = ember.Trainer(max_epochs=2, limit_val_batches=1, num_sanity_val_steps=0,
                                check_val_every_n_epoch=2, val_check_interval={"seconds": 1}, **QUIET)
        trainer.fit(model, loader(3), loader(2))
    assert [epoch for epoch, _ in model.validations] == [1, 1, 1]


def test_time_based_val_check_interval_allows_check_val_every_n_epoch_none() -> None:
    ember.Trainer(accelerator="cpu", val_check_interval="00:00:01:00", check_val_every_n_epoch=None)
    with pytest.raises(ember.ConfigurationError, match="should be an integer or a time-based duration"):
        ember.Trainer(accelerator="cpu", val_check_interval=0.5, check_val_every_n_epoch=None)


@pytest.mark.parametrize(("value", "match"), [("1:2:3", "DD:HH:MM:SS"), ("00:00:a:00", "whole number"),
                                              ({"fortnights": 1}, "keyword arguments"), ("00:00:00:00", "longer")])
def test_invalid_time_intervals_are_named(value: Any, match: str) -> None:
    with pytest.raises(ember.ConfigurationError, match=match):
        ember.Trainer(accelerator="cpu", val_check_interval=value)


@pytest.mark.parametrize(("value", "says"), [(1, "after every training batch"), (1.0, "at the end of each")])
def test_val_check_interval_of_one_says_which_one(value: Any, says: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        ember.Trainer(accelerator="cpu", val_check_interval=value)
    assert f"`Trainer(val_check_interval={value})` was configured so validation will run {says}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        ember.Trainer(accelerator="cpu")
    assert "val_check_interval" not in caplog.text


def test_fast_dev_run_ignores_a_val_check_interval_longer_than_its_epoch() -> None:
    model = CountsValidation()
    trainer = ember.Trainer(fast_dev_run=1, val_check_interval=2, **QUIET)
    trainer.fit(model, loader(4), loader(2))
    assert model.validations == [(0, 1)]


# -- barebones -----------------------------------------------------------------------------------------------
def test_barebones_says_so_and_reads_log_every_n_steps_as_zero(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        trainer = ember.Trainer(accelerator="cpu", barebones=True)
    assert "running in `Trainer(barebones=True)` mode" in caplog.text
    assert trainer.barebones and trainer.log_every_n_steps == 0
    with pytest.raises(ember.ConfigurationError, match=r"log_every_n_steps=1\)` was passed"):
        ember.Trainer(accelerator="cpu", barebones=True, log_every_n_steps=1)


def test_barebones_self_log_warns_and_records_nothing() -> None:
    class Logs(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("seen", 1.0)
            return loss

    trainer = ember.Trainer(accelerator="cpu", barebones=True, max_epochs=1)
    with pytest.warns(UserWarning, match=r"barebones=True\)` is configured"):
        trainer.fit(Logs(), loader(2))
    assert "seen" not in trainer.callback_metrics


# -- errors and messages code written for Lightning looks for ------------------------------------------------
@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_evaluation_without_any_model_is_a_type_error(fn: str) -> None:
    trainer = ember.Trainer(**QUIET)
    with pytest.raises(TypeError, match=rf"{fn}\(\)` requires a `LightningModule"):
        getattr(trainer, fn)()


@pytest.mark.parametrize("fn", ["fit", "validate", "test", "predict"])
def test_a_module_without_the_step_method_is_a_type_error(fn: str) -> None:
    trainer = ember.Trainer(**QUIET)
    with pytest.raises(TypeError, match=r"must be a `LightningModule`.*got `Linear"):
        getattr(trainer, fn)(torch.nn.Linear(2, 2))


def test_evaluation_without_a_model_uses_the_fitted_one() -> None:
    model = CountsValidation()
    trainer = ember.Trainer(max_epochs=1, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model, loader(2), loader(2))
    assert trainer.validate(dataloaders=loader(2), verbose=False)
    assert trainer.module is model


def test_argument_messages_name_the_argument_as_lightning_does() -> None:
    with pytest.raises(TypeError, match="`gradient_clip_val` should be an int or a float"):
        ember.Trainer(accelerator="cpu", gradient_clip_val=(1, 2))
    with pytest.raises(ValueError, match="`gradient_clip_algorithm` norm2 is invalid"):
        ember.Trainer(accelerator="cpu", gradient_clip_algorithm="norm2")
    with pytest.raises(ValueError, match="`max_epochs` must be a non-negative integer or -1"):
        ember.Trainer(accelerator="cpu", max_epochs=-100)
    with pytest.raises(ValueError, match="`check_val_every_n_epoch` should be an integer, found 1.2"):
        ember.Trainer(accelerator="cpu", check_val_every_n_epoch=1.2)


def test_default_root_dir_expands_the_home_directory() -> None:
    import os
    from pathlib import Path

    home = os.path.expanduser("~")
    assert ember.Trainer(accelerator="cpu", default_root_dir="~/runs").default_root_dir == os.path.join(home, "runs")
    assert ember.Trainer(accelerator="cpu", default_root_dir=Path("~/runs")).default_root_dir == \
        os.path.join(home, "runs")
    assert ember.Trainer(accelerator="cpu", default_root_dir="s3://bucket/~x").default_root_dir == "s3://bucket/~x"


# -- predict --------------------------------------------------------------------------------------------------
class PredictsSome(TinyClassifier):
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return None if batch_idx % 2 else self(batch[0])


def test_predict_warns_when_predict_step_returns_none() -> None:
    trainer = ember.Trainer(**QUIET)
    with pytest.warns(UserWarning, match="predict returned None"):
        out = trainer.predict(PredictsSome(), loader(2))
    assert out is not None and out[1] is None and isinstance(out[0], torch.Tensor)


def test_predict_return_predictions_none_means_return_them() -> None:
    trainer = ember.Trainer(**QUIET)
    out = trainer.predict(TinyClassifier(), loader(3), return_predictions=None)
    assert out is not None and len(out) == 3


# -- trainer.init_module ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("precision", "dtype"), [("32-true", torch.float32), ("64-true", torch.float64),
                                                  ("bf16-true", torch.bfloat16)])
def test_init_module_builds_on_the_run_device_in_the_precision_dtype(precision: str, dtype: torch.dtype) -> None:
    trainer = ember.Trainer(precision=precision, **QUIET)
    with trainer.init_module():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.device == trainer.root_device and layer.weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32  # restored
    assert torch.nn.Linear(2, 2).weight.dtype == torch.float32


def test_single_device_strategy_has_no_launcher() -> None:
    assert ember.Trainer(**QUIET).strategy.launcher is None


# -- configure_optimizers ------------------------------------------------------------------------------------
def _fit_with(configure: Any) -> None:
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            return configure(self)

    ember.Trainer(max_epochs=1, **QUIET).fit(Model(), loader(2))


def test_unknown_lr_scheduler_keys_warn_and_are_ignored() -> None:
    def configure(m: Any) -> Any:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                                   "intervl": "step"}}

    with pytest.warns(RuntimeWarning, match=r"Found unsupported keys in the lr scheduler dict: .*'interval'"):
        _fit_with(configure)


def test_a_scheduler_of_an_optimizer_not_returned_is_an_error() -> None:
    def configure(m: Any) -> Any:
        opt1, opt2 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)
        return [opt1], [torch.optim.lr_scheduler.StepLR(opt2, 1)]

    with pytest.raises(ember.ConfigurationError, match="attached with an optimizer that wasn't returned"):
        _fit_with(configure)


def test_an_unknown_interval_says_which_are_allowed() -> None:
    def configure(m: Any) -> Any:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                                   "interval": "sometimes"}}

    with pytest.raises(ember.ConfigurationError, match=r'The "interval" key in lr scheduler dict must be'):
        _fit_with(configure)


@pytest.mark.parametrize("limit", [0, 0.0])
def test_val_check_interval_longer_than_the_epoch_is_fine_without_validation(limit: Any) -> None:
    model = CountsValidation()
    trainer = ember.Trainer(max_epochs=1, val_check_interval=10, limit_val_batches=limit, **QUIET)
    trainer.fit(model, loader(3), loader(2))
    assert trainer.global_step == 3 and model.validations == []
    with pytest.raises(ember.ConfigurationError, match="must be less than or equal to the number of the training"):
        ember.Trainer(max_epochs=1, val_check_interval=10, **QUIET).fit(CountsValidation(), loader(3), loader(2))


def test_epoch_schedulers_do_not_step_for_an_epoch_that_ends_early() -> None:
    steps: list[str] = []

    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            plain = torch.optim.lr_scheduler.StepLR(opt, 1)
            plateau.step = lambda *a, **k: steps.append("plateau")  # type: ignore[method-assign]
            plain.step = lambda *a, **k: steps.append("plain")  # type: ignore[method-assign]
            return [opt], [{"scheduler": plateau, "monitor": "never_logged"}, plain]

    ember.Trainer(max_steps=1, **QUIET).fit(Model(), loader(4))  # ends after 1 of 4 batches: nothing steps
    assert steps == []
    with pytest.raises(ember.ConfigurationError, match="never_logged"):
        ember.Trainer(max_epochs=1, **QUIET).fit(Model(), loader(2))  # a whole epoch: the plateau one steps


# -- data ----------------------------------------------------------------------------------------------------
class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(tiny_dataset(n=4))


class _SizedStream(_Stream):
    def __len__(self) -> int:
        return 4


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_an_iterable_dataset_with_a_length_gets_a_warning(stage: str) -> None:
    trainer = ember.Trainer(max_epochs=1, **QUIET)
    with pytest.warns(UserWarning, match=r"Your `IterableDataset` has `__len__` defined"):
        getattr(trainer, stage)(TinyClassifier(), DataLoader(_SizedStream(), batch_size=2))
    getattr(ember.Trainer(max_epochs=1, **QUIET), stage)(TinyClassifier(), DataLoader(_Stream(), batch_size=2))


# -- ckpt_path="best" --------------------------------------------------------------------------------------------
def test_best_without_a_checkpoint_callback_says_none_is_configured() -> None:
    trainer = ember.Trainer(max_epochs=1, **QUIET)
    trainer.fit(TinyClassifier(), loader(2))
    with pytest.raises(ValueError, match="`ModelCheckpoint` is not configured."):
        trainer.test(ckpt_path="best", dataloaders=loader(2), verbose=False)


def test_best_with_save_top_k_zero_says_no_best_is_kept(tmp_path: Any) -> None:
    from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint

    trainer = ember.Trainer(**{**QUIET, "enable_checkpointing": True}, max_epochs=1, default_root_dir=str(tmp_path),
                            callbacks=[ModelCheckpoint(dirpath=str(tmp_path), save_top_k=0)])
    trainer.fit(TinyClassifier(), loader(2))
    with pytest.raises(ValueError, match="is not configured to save the best"):
        trainer.test(ckpt_path="best", dataloaders=loader(2), verbose=False)


class _NotAScheduler:
    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


class _Manual(TinyClassifier):
    def __init__(self, scheduler: Any) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.make_scheduler = scheduler

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))
        opt.step()

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [self.make_scheduler(opt)]


def test_manual_optimization_accepts_any_scheduler_object() -> None:
    ember.Trainer(max_epochs=1, **QUIET).fit(_Manual(_NotAScheduler), loader(2))
    with pytest.raises(ember.ConfigurationError, match="doesn't follow PyTorch's LRScheduler"):
        _fit_with(lambda m: ([o := torch.optim.SGD(m.parameters(), lr=0.1)], [_NotAScheduler(o)]))


def test_manual_optimization_ignores_plateau_keys_with_a_warning() -> None:
    def plateau(opt: Any) -> Any:
        return {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "monitor": "x", "interval": "step"}

    trainer = ember.Trainer(max_epochs=1, **QUIET)
    with pytest.warns(RuntimeWarning, match=r"\['monitor'\], but the keys will be ignored"):
        trainer.fit(_Manual(plateau), loader(2))
    assert trainer.lr_scheduler_configs[0].interval == "step"
    ember.Trainer(max_epochs=1, **QUIET).fit(_Manual(torch.optim.lr_scheduler.ReduceLROnPlateau), loader(2))


def test_train_dataloader_is_the_loader_given_to_fit() -> None:
    given = loader(3)
    trainer = ember.Trainer(max_epochs=1, **QUIET)
    assert trainer.train_dataloader is None
    trainer.fit(TinyClassifier(), given)
    assert trainer.train_dataloader is given and trainer.num_training_batches == 3


def test_a_missing_checkpoint_file_is_a_file_not_found_error() -> None:
    trainer = ember.Trainer(**QUIET)
    with pytest.raises(FileNotFoundError, match="random.ckpt"):
        trainer.test(TinyClassifier(), loader(2), ckpt_path="random.ckpt", verbose=False)
