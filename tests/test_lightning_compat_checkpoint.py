"""Lightning's behaviour of ModelCheckpoint, EarlyStopping and the CSV and TensorBoard loggers where ember follows
it: ``ember.lightning``'s ModelCheckpoint defaults, state keys, messages, ``to_yaml``, the clock, the loggers'
extra surface; and that a failed fit's book-keeping names only files that were written."""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import yaml

import ember
from ember.core.errors import ConfigurationError
from ember.lightning.pytorch.callbacks import early_stopping as lightning_early_stopping
from ember.lightning.pytorch.callbacks import model_checkpoint as lightning_checkpoint
from ember.plugins.callbacks.early_stopping import EarlyStopping
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.plugins.loggers.csv_logger import CSVLogger
from ember.testing import TinyClassifier, tiny_loaders

LightningModelCheckpoint = lightning_checkpoint.ModelCheckpoint
QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False}


class Scored(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.log("score", float(5 - self.current_epoch))


def fit(tmp_path: Path, callbacks: list[Any], epochs: int = 2, model: Any = None, ckpt_path: str | None = None,
        **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), **QUIET, callbacks=callbacks,
                            **kwargs)
    trainer.fit(model or Scored(), *tiny_loaders(n=32), ckpt_path=ckpt_path)  # 4 steps per epoch
    return trainer


def names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


# -- ember.lightning's ModelCheckpoint: Lightning's defaults ---------------------------------------------------
def test_lightning_model_checkpoint_writes_no_last_unless_asked(tmp_path: Path) -> None:
    fit(tmp_path, [LightningModelCheckpoint(dirpath=tmp_path / "l")])
    assert names(tmp_path / "l") == ["epoch=1-step=8.ckpt"]
    fit(tmp_path, [ModelCheckpoint(dirpath=tmp_path / "e")])  # ember's own keeps save_last=True
    assert names(tmp_path / "e") == ["epoch=1-step=8.ckpt", "last.ckpt"]


def test_every_ember_model_checkpoint_is_an_instance_of_lightnings_name() -> None:
    assert isinstance(ModelCheckpoint(), LightningModelCheckpoint)
    assert issubclass(ModelCheckpoint, LightningModelCheckpoint)
    assert not isinstance(EarlyStopping(monitor="x"), LightningModelCheckpoint)

    class Custom(LightningModelCheckpoint):
        pass

    assert isinstance(Custom(), LightningModelCheckpoint) and isinstance(Custom(), ModelCheckpoint)
    assert not isinstance(ModelCheckpoint(), Custom) and not isinstance(LightningModelCheckpoint(), Custom)
    assert not issubclass(ModelCheckpoint, Custom) and issubclass(Custom, LightningModelCheckpoint)
    from ember.lightning.pytorch.callbacks import ModelCheckpoint as Exported

    assert Exported is LightningModelCheckpoint


def test_lightning_model_checkpoint_keeps_another_runs_last(tmp_path: Path) -> None:
    for _ in range(2):
        fit(tmp_path, [LightningModelCheckpoint(dirpath=tmp_path / "l", save_top_k=0, save_last=True)],
            limit_val_batches=0)
    assert names(tmp_path / "l") == ["last-v1.ckpt", "last.ckpt"]
    for _ in range(2):
        fit(tmp_path, [ModelCheckpoint(dirpath=tmp_path / "e", save_top_k=0)], limit_val_batches=0)
    assert names(tmp_path / "e") == ["last.ckpt"]  # ember's own overwrites it in place


def test_save_last_writes_at_the_end_when_no_save_was_due(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=5, save_top_k=0)
    trainer = fit(tmp_path, [cb])
    assert names(tmp_path) == ["last.ckpt"] and cb.last_model_path == str(tmp_path / "last.ckpt")
    assert safe_load(cb.last_model_path)["global_step"] == trainer.global_step == 8


def test_the_clock_is_read_through_the_lightning_module(tmp_path: Path) -> None:
    ticks = iter(range(0, 10_000, 7))  # each reading 7 seconds after the previous one
    with mock.patch.object(lightning_checkpoint, "time") as clock:
        clock.monotonic.side_effect = lambda: float(next(ticks))
        cb = LightningModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(seconds=20), save_top_k=-1)
        fit(tmp_path, [cb], epochs=1, limit_val_batches=0)
    # readings: 0 at the start, then 7, 14, 21 (a save), 28 per batch
    assert names(tmp_path) == ["epoch=0-step=3.ckpt"]


# -- state keys ----------------------------------------------------------------------------------------------
def test_state_keys_are_lightnings() -> None:
    assert ModelCheckpoint(monitor="val_loss").state_key == (
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
        "'train_time_interval': None}")
    assert EarlyStopping(monitor="val_loss").state_key == "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}"


def test_a_checkpoint_under_the_former_key_still_restores_model_checkpoint(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, filename="{epoch}")
    trainer = fit(tmp_path, [cb])
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)
    state = checkpoint["plugins"].pop(cb.state_key)
    checkpoint["plugins"]["callback.model-checkpoint{monitor='score', mode='min', every_n_train_steps=0, "
                          "every_n_epochs=1, train_time_interval=None}"] = state
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    resumed = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, filename="{epoch}")
    fit(tmp_path, [resumed], epochs=trainer.max_epochs, ckpt_path=str(old))  # restores, trains nothing
    assert resumed.best_k_models == cb.best_k_models and resumed.best_model_path == cb.best_model_path


# -- arguments, to_yaml, setup ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"save_top_k": -3}, r"save_top_k=-3\) is invalid. Must be >= -1"),
    ({"every_n_epochs": -3}, r"every_n_epochs=-3\) is invalid. Must be >= 0"),
    ({"every_n_train_steps": -1}, r"every_n_train_steps=-1\) is invalid. Must be >= 0"),
    ({"every_n_train_steps": 1, "every_n_epochs": 2}, r"Combination of parameters every_n_train_steps"),
    ({"save_top_k": 3}, r"ModelCheckpoint\(save_top_k=3, monitor=None\) is not a valid"),
    ({"mode": "unknown_option"}, r"`mode` can be .* but got unknown_option"),
])
def test_invalid_arguments_say_what_lightning_says(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ModelCheckpoint(**kwargs)


def test_to_yaml_writes_the_best_k_models(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, filename="{epoch}")
    fit(tmp_path, [cb], epochs=3)
    cb.to_yaml(tmp_path / "best.yaml")
    assert yaml.safe_load((tmp_path / "best.yaml").read_text()) == {str(tmp_path / "epoch=1.ckpt"): 4.0,
                                                                     str(tmp_path / "epoch=2.ckpt"): 3.0}
    cb.to_yaml()
    assert (tmp_path / "best_k_models.yaml").is_file()


def test_setup_takes_lightnings_keywords(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path)
    cb.setup(trainer=ember.Trainer(accelerator="cpu", logger=False), pl_module=TinyClassifier(), stage="fit")
    assert cb.dirpath == str(tmp_path)


# -- a failed fit ----------------------------------------------------------------------------------------------
class FailsInValidation(Scored):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_step == 4:
            raise RuntimeError("Trouble!")


def test_a_failed_fit_names_only_checkpoints_that_were_written(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2)
    with pytest.raises(RuntimeError, match="Trouble!"):
        # step 4's save is asked for at the batch's end; its validation fails before the loop writes it
        fit(tmp_path, [cb], model=FailsInValidation())
    assert names(tmp_path) == ["epoch=0-step=2.ckpt", "last.ckpt"]
    assert cb.best_model_path == str(tmp_path / "epoch=0-step=2.ckpt")
    assert cb.last_model_path == str(tmp_path / "last.ckpt") and os.path.exists(cb.last_model_path)


# -- EarlyStopping's messages ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("rank_zero_only", "world_size", "rank", "expected"), [
    (False, 1, 0, "bar"), (False, 2, 1, "[rank: 1] bar"), (True, 2, 0, "[rank: 0] bar"), (True, 2, 1, None)])
def test_early_stopping_logs_through_the_modules_logger(rank_zero_only: bool, world_size: int, rank: int,
                                                        expected: str | None) -> None:
    trainer = mock.Mock(global_rank=rank, world_size=world_size)
    with mock.patch.object(lightning_early_stopping.log, "info") as info:
        EarlyStopping._log_info(trainer, "bar", rank_zero_only)
    assert info.call_args_list == ([mock.call(expected)] if expected else [])


def test_early_stopping_says_why_it_stopped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stopping = EarlyStopping(monitor="score", mode="max", patience=1)
    with caplog.at_level(logging.INFO, logger="ember"):
        fit(tmp_path, [stopping], epochs=5)
    assert stopping.stopped_epoch == 1 and "EarlyStopping: score did not improve" in caplog.text


# -- loggers -------------------------------------------------------------------------------------------------
def test_csv_experiment_metrics_are_the_rows_not_yet_written(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    logger.log_metrics({"test": 1}, step=0)
    assert logger.experiment.metrics == [{"step": 0, "test": 1}]
    logger.log_metrics({"test": 1}, step=1)
    assert logger.experiment.metrics == []
    header = Path(logger.experiment.metrics_file_path).read_text().splitlines()[0]
    assert header == "step,test"  # no epoch column when no row has one


def test_tensorboard_logger_lightning_surface(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger

    class Named(TensorBoardLogger):
        @property
        def name(self) -> str:
            return "named"

    logger = Named(tmp_path, version=0, sub_dir="sub", default_hp_metric=False, log_graph=True)
    assert logger.log_dir == str(tmp_path / "named" / "version_0" / "sub")
    assert logger.hp_metric is None
    logger.log_hyperparams({"lr": 0.1}, {"abc": torch.tensor([0.5])})
    model = torch.nn.Linear(4, 2)
    logger.log_graph(model, torch.rand(2, 4))
    logger.log_graph(TinyClassifier(), torch.rand(2, 8))  # an ember.Module outside a fit traces too
    with pytest.warns(UserWarning, match="The `model.example_input_array` .* was not given"):
        logger.log_graph(model)
    with pytest.warns(UserWarning, match="can't be traced by TensorBoard"):
        logger.log_graph(model, {"x": 1})
    logger.finalize()
    assert (tmp_path / "named" / "version_0" / "sub" / "hparams.yaml").is_file()
    assert TensorBoardLogger("~/tb", version=0).log_dir == os.path.join(os.path.expanduser("~"), "tb", "ember_logs",
                                                                        "version_0")


def test_restoring_into_another_folder_warns(tmp_path: Path) -> None:
    written = ModelCheckpoint(dirpath=tmp_path / "a", save_top_k=-1)
    written.best_model_path = str(tmp_path / "a" / "epoch=0.ckpt")
    restored = ModelCheckpoint(dirpath=tmp_path / "elsewhere", save_top_k=-1)
    with pytest.warns(UserWarning, match="The dirpath has changed from"):
        restored.load_state_dict(written.state_dict())
    assert restored.best_model_path == written.best_model_path and restored.best_k_models == {}


def test_lightning_save_last_annotation_parses_on_the_command_line() -> None:
    from inspect import signature

    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--a", type=signature(LightningModelCheckpoint).parameters["save_last"].annotation)
    assert [parser.parse_args(["--a", v]).a for v in ("yes", "false", "link")] == [True, False, "link"]


def test_save_last_link_needs_a_local_folder() -> None:
    cb = LightningModelCheckpoint(dirpath="memory://not-a-filesystem-path", save_last="link")
    with pytest.raises(ConfigurationError, match="save_last='link'.* is only supported for local file paths"):
        cb.setup(trainer=ember.Trainer(accelerator="cpu", logger=False), pl_module=TinyClassifier(), stage="fit")


def test_a_mock_logger_does_not_go_into_the_checkpoint(tmp_path: Path) -> None:
    logger = mock.MagicMock()  # answers state_dict() with a MagicMock, which no checkpoint can hold
    kwargs = {**QUIET, "logger": logger}
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), callbacks=[ModelCheckpoint(dirpath=tmp_path)],
                            **kwargs)
    trainer.fit(Scored(), *tiny_loaders(n=32))
    assert names(tmp_path) == ["epoch=0-step=4.ckpt", "last.ckpt"]


def test_csv_logger_writes_to_an_fsspec_url() -> None:
    import fsspec

    logger = CSVLogger(save_dir="memory://ember-csv-remote")
    logger.experiment.log_metrics({"loss": 0.1})
    logger.experiment.save()
    logger.log_metrics({"loss": 0.2, "acc": 1.0})
    logger.save()
    fs, _ = fsspec.core.url_to_fs("memory://ember-csv-remote")
    with fs.open(logger.experiment.metrics_file_path, "r") as f:
        assert f.read().splitlines() == ["step,loss,acc", "0,0.1,", "1,0.2,1.0"]
    assert not os.path.exists("memory:")  # nothing local
