"""A Trainer taken through Lightning's names gets Lightning's default logs folder (``lightning_logs``) and default
``ModelCheckpoint``; Lightning's logger classes default to that folder too; ``ember.lightning``'s ModelCheckpoint
takes its steps through the methods Lightning's subclasses override (``_save_checkpoint``,
``_format_checkpoint_name``, ``_find_last_checkpoints``, ...), and links ``last.ckpt`` with ``save_last="link"``;
``overfit_batches`` wins over a limit passed with it."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
import ember.lightning.pytorch as pl
from ember.lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint
from ember.lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from ember.plugins.loggers.csv_logger import CSVLogger as EmberCSVLogger
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False,
         "enable_model_summary": False}


class Scored(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.log("score", float(5 - self.current_epoch))


def fit(trainer: Any, model: Any = None, ckpt_path: str | None = None) -> Any:
    trainer.fit(model or Scored(), *tiny_loaders(n=32), ckpt_path=ckpt_path)  # 4 steps per epoch
    return trainer


def names(path: Path | str) -> list[str]:
    return sorted(os.listdir(path))


# -- the default logs folder -----------------------------------------------------------------------------------
def test_lightning_trainer_logs_to_lightning_logs(tmp_path: Path) -> None:
    trainer = fit(pl.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET))
    assert trainer.logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")
    assert names(tmp_path) == ["lightning_logs"]
    assert names(tmp_path / "lightning_logs" / "version_0" / "checkpoints") == ["epoch=0-step=4.ckpt"]
    # a second Trainer of the same kind continues the numbering in the same folder
    fit(pl.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET))
    assert names(tmp_path / "lightning_logs") == ["version_0", "version_1"]


def test_ember_trainer_keeps_ember_logs(tmp_path: Path) -> None:
    trainer = fit(ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET))
    assert trainer.logger.log_dir == str(tmp_path / "ember_logs" / "version_0")
    # ember's default checkpoint callback keeps last.ckpt
    assert names(tmp_path / "ember_logs" / "version_0" / "checkpoints") == ["epoch=0-step=4.ckpt", "last.ckpt"]


def test_named_logger_is_not_replaced(tmp_path: Path) -> None:
    trainer = pl.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **{**QUIET, "logger": "csv"})
    assert type(trainer.logger) is EmberCSVLogger and trainer.logger.name == "ember_logs"


def test_lightning_logger_classes_default_to_lightning_logs(tmp_path: Path) -> None:
    assert CSVLogger(tmp_path).name == "lightning_logs"
    assert TensorBoardLogger(tmp_path).name == "lightning_logs"
    assert CSVLogger(tmp_path, name=None).name == ""
    assert EmberCSVLogger(tmp_path).name == "ember_logs"
    assert isinstance(CSVLogger(tmp_path), EmberCSVLogger)
    # Lightning's positions: save_dir, name, version, log_graph, default_hp_metric, prefix, sub_dir
    logger = TensorBoardLogger(str(tmp_path), "runs", 3, False, False, "p", "sub")
    assert (logger.name, logger.version, logger.prefix, logger.hp_metric) == ("runs", 3, "p", None)
    assert logger.log_dir == str(tmp_path / "runs" / "version_3" / "sub")


def test_lightning_trainer_default_checkpoint_writes_no_last(tmp_path: Path) -> None:
    trainer = fit(pl.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **{**QUIET, "logger": False}))
    assert isinstance(trainer.checkpoint_callback, ModelCheckpoint)
    assert type(trainer.checkpoint_callback) is ModelCheckpoint
    assert names(tmp_path / "checkpoints") == ["epoch=1-step=8.ckpt"]


def test_checkpoint_asks_trainer_by_position(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []

    class Recording(ember.Trainer):
        def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            calls.append((args, kwargs))
            super().save_checkpoint(*args, **kwargs)

    fit(Recording(max_epochs=1, default_root_dir=str(tmp_path), **{**QUIET, "logger": False}))
    assert calls == [((str(tmp_path / "checkpoints" / "epoch=0-step=4.ckpt"), False), {}),
                     ((str(tmp_path / "checkpoints" / "last.ckpt"), False), {})]


# -- ModelCheckpoint's steps under Lightning's names --------------------------------------------------------
def lightning_fit(tmp_path: Path, callback: Any, epochs: int = 2, **kwargs: Any) -> Any:
    trainer = pl.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), callbacks=[callback],
                         **{**QUIET, "logger": False, **kwargs})
    return fit(trainer)


def test_overridden_save_and_remove_are_used(tmp_path: Path) -> None:
    saved: list[str] = []
    removed: list[str] = []

    class Uploading(ModelCheckpoint):
        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            saved.append(os.path.basename(filepath))
            super()._save_checkpoint(trainer, filepath)

        def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
            removed.append(os.path.basename(filepath))
            super()._remove_checkpoint(trainer, filepath)

    cb = Uploading(dirpath=tmp_path / "c", monitor="score", save_last=True)
    lightning_fit(tmp_path, cb, epochs=3)
    assert saved == ["epoch=0-step=4.ckpt", "last.ckpt", "epoch=1-step=8.ckpt", "last.ckpt",
                     "epoch=2-step=12.ckpt", "last.ckpt"]
    assert removed == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]
    assert names(tmp_path / "c") == ["epoch=2-step=12.ckpt", "last.ckpt"]


def test_overridden_file_names_and_candidates_are_used(tmp_path: Path) -> None:
    class Named(ModelCheckpoint):
        def _format_checkpoint_name(self, filename: str | None, metrics: dict[str, Any], prefix: str | None = None,
                                    auto_insert_metric_name: bool = True) -> str:
            return "run-" + super()._format_checkpoint_name(filename, metrics, prefix, auto_insert_metric_name)

        def _monitor_candidates(self, trainer: Any) -> dict[str, Any]:
            return {**super()._monitor_candidates(trainer), "twice": 2 * trainer.current_epoch}

    cb = Named(dirpath=tmp_path / "c", filename="{epoch}-{twice}", save_top_k=-1)
    lightning_fit(tmp_path, cb)
    assert names(tmp_path / "c") == ["run-epoch=0-twice=0.ckpt", "run-epoch=1-twice=2.ckpt"]
    assert cb._format_checkpoint_name(None, {"epoch": 3, "step": 2}, prefix="x") == "run-x-epoch=3-step=2"
    assert cb.format_checkpoint_name({"epoch": 1}, "{epoch}", ver=2, prefix="x") == str(
        tmp_path / "c" / "run-x-epoch=1-v2.ckpt")


def test_overridden_skip_and_top_k_decisions_are_used(tmp_path: Path) -> None:
    class EveryOther(ModelCheckpoint):
        def _should_skip_saving_checkpoint(self, trainer: Any) -> bool:
            return super()._should_skip_saving_checkpoint(trainer) or trainer.current_epoch % 2 == 1

        def check_monitor_top_k(self, trainer: Any, current: Any = None) -> bool:
            return True  # keep every checkpoint, whatever the score

    cb = EveryOther(dirpath=tmp_path / "c", monitor="score", save_top_k=5, filename="{epoch}")
    lightning_fit(tmp_path, cb, epochs=4)
    assert names(tmp_path / "c") == ["epoch=0.ckpt", "epoch=2.ckpt"]
    assert set(map(os.path.basename, cb.best_k_models)) == {"epoch=0.ckpt", "epoch=2.ckpt"}


def test_find_last_checkpoints_chooses_the_resume_file(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    for name in ("last", "last.ckpt", "last-v1.ckpt", "other.ckpt", "last.pt"):
        (folder / name).touch()
    os.utime(folder / "last.ckpt", (1, 1))
    cb = ModelCheckpoint(dirpath=folder)
    trainer = pl.Trainer(**QUIET)
    assert cb._find_last_checkpoints(trainer) == {str(folder / "last.ckpt"), str(folder / "last-v1.ckpt")}
    cb.save_last = True
    assert cb.last_checkpoint_path(trainer) == str(folder / "last-v1.ckpt")  # the newer of the two

    class Only(ModelCheckpoint):
        def _find_last_checkpoints(self, trainer: Any) -> set[str]:
            return {str(folder / "last.ckpt")}

    only = Only(dirpath=folder, save_last=True)
    assert only.last_checkpoint_path(trainer) == str(folder / "last.ckpt")


def test_save_last_link(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path / "c", monitor="score", save_last="link")
    trainer = lightning_fit(tmp_path, cb, epochs=3)
    last = tmp_path / "c" / "last.ckpt"
    assert names(tmp_path / "c") == ["epoch=2-step=12.ckpt", "last.ckpt"]
    assert os.path.islink(last) and os.readlink(last) == "epoch=2-step=12.ckpt"
    assert cb._last_checkpoint_saved == str(tmp_path / "c" / "epoch=2-step=12.ckpt")
    # the link resumes like the file
    resumed = pl.Trainer(max_epochs=4, default_root_dir=str(tmp_path), **{**QUIET, "logger": False},
                         callbacks=[ModelCheckpoint(dirpath=tmp_path / "c", monitor="score", save_last="link")])
    fit(resumed, ckpt_path="last")
    assert trainer.global_step == 12 and resumed.global_step == 16
    assert os.readlink(last) == "epoch=3-step=16.ckpt"


def test_link_checkpoint_replaces_what_is_there(tmp_path: Path) -> None:
    trainer = pl.Trainer(**QUIET)
    (tmp_path / "a").touch()
    (tmp_path / "b").touch()
    (tmp_path / "link").mkdir()
    ModelCheckpoint._link_checkpoint(trainer, str(tmp_path / "a"), str(tmp_path / "link"))
    assert os.readlink(tmp_path / "link") == "a"
    ModelCheckpoint._link_checkpoint(trainer, str(tmp_path / "b"), str(tmp_path / "link"))
    assert os.readlink(tmp_path / "link") == "b"


def test_private_names_read_and_write_the_settings(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path)
    assert (cb._every_n_train_steps, cb._every_n_epochs, cb._enable_version_counter) == (0, 1, True)
    cb._every_n_epochs = 2
    assert cb.every_n_epochs == 2


def test_subclass_calls_hooks_with_lightning_arguments(tmp_path: Path) -> None:
    ends: list[int] = []

    class Counting(ModelCheckpoint):
        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            ends.append(trainer.global_step)
            super().on_train_end(trainer, pl_module)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            super().on_train_epoch_end(trainer, pl_module)

    lightning_fit(tmp_path, Counting(dirpath=tmp_path / "c"), epochs=1)
    assert ends == [4] and names(tmp_path / "c") == ["epoch=0-step=4.ckpt"]


# -- overfit_batches --------------------------------------------------------------------------------------------
def test_overfit_batches_ignores_limits_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="limit_val_batches=0.5 is ignored"):
        trainer = ember.Trainer(**QUIET, overfit_batches=3, limit_val_batches=0.5)
    assert (trainer.limit_train_batches, trainer.limit_val_batches) == (3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.Trainer(**QUIET, overfit_batches=3, limit_train_batches=3)  # the same value: nothing to say


def test_ember_loggers_count_as_lightning_loggers(tmp_path: Path) -> None:
    from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger as EmberTensorBoardLogger

    assert isinstance(EmberCSVLogger(tmp_path), CSVLogger)
    assert isinstance(EmberTensorBoardLogger(tmp_path), TensorBoardLogger)

    class Mine(CSVLogger):
        pass

    assert not isinstance(EmberCSVLogger(tmp_path), Mine) and isinstance(Mine(tmp_path), CSVLogger)


# -- self.log ---------------------------------------------------------------------------------------------------
def test_log_refuses_a_dataloader_suffix_in_the_name(tmp_path: Path) -> None:
    class Suffixed(TinyClassifier):
        def __init__(self, add: bool) -> None:
            super().__init__()
            self.add = add

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.log("foo/dataloader_idx_0", loss, add_dataloader_idx=self.add)
            return loss

    def run(add: bool) -> Any:
        trainer = ember.Trainer(max_epochs=1, limit_train_batches=1, **{**QUIET, "logger": False},
                                enable_checkpointing=False)
        trainer.fit(Suffixed(add), tiny_loaders(n=32)[0])
        return trainer

    with pytest.raises(ember.ConfigurationError, match="`self.log` with the key `foo/dataloader_idx_0`"):
        run(True)
    assert "foo/dataloader_idx_0" in run(False).callback_metrics  # kept as it is when asked


def test_lightning_cli_trainer_has_lightning_defaults(tmp_path: Path) -> None:
    from ember.lightning.pytorch.cli import LightningCLI

    class Tiny(pl.LightningModule):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(width, 1)

    cli = LightningCLI(Tiny, run=False, args=["--trainer.default_root_dir", str(tmp_path)])
    assert cli.trainer.logger.name == "lightning_logs" and cli.trainer.checkpoint_callback.save_last is None


def test_epoch_end_value_belongs_to_every_dataloader(tmp_path: Path) -> None:
    class TwoLoaders(TinyClassifier):
        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("foo", float(dataloader_idx + 1))

        def on_test_epoch_end(self) -> None:
            self.log("foobar", 3.0)

    loader = tiny_loaders(n=16)[1]
    trainer = ember.Trainer(**{**QUIET, "logger": False}, enable_checkpointing=False, limit_test_batches=1)
    results = trainer.test(TwoLoaders(), [loader, loader], ckpt_path="current", verbose=False)
    # as in Lightning: no dataloader suffix on what the epoch's end logs, and it is in each dataloader's results
    assert results == [{"foo/dataloader_idx_0": 1.0, "foobar": 3.0}, {"foo/dataloader_idx_1": 2.0, "foobar": 3.0}]
    assert set(trainer.callback_metrics) == {"foo/dataloader_idx_0", "foo/dataloader_idx_1", "foobar"}


def test_log_with_logger_true_and_no_logger_warns(tmp_path: Path) -> None:
    class Explicit(TinyClassifier):
        def __init__(self, logger: bool | None) -> None:
            super().__init__()
            self.to_logger = logger

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.log("epoch", -batch_idx, logger=self.to_logger)
            return loss

    def run(logger: bool | None) -> Any:
        trainer = ember.Trainer(max_epochs=1, limit_train_batches=2, **{**QUIET, "logger": False},
                                enable_checkpointing=False)
        trainer.fit(Explicit(logger), tiny_loaders(n=32)[0])
        return trainer

    with pytest.warns(UserWarning, match=r"self.log\('epoch', ..., logger=True\)` but have no logger"):
        trainer = run(True)
    assert trainer.logged_metrics["epoch"] == -1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(None)  # the default: nothing to say
