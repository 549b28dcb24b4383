"""Checkpoints as Lightning code sees them: a ReduceLROnPlateau scheduler reads its monitor through
``trainer.fit_loop.epoch_loop._get_monitor_value``; ``ModelCheckpoint`` names a file still being written in the
background as taken (``-v1``, ... as if it were on disk); ``ckpt_path="last"`` falls back to
``OnExceptionCheckpoint``'s file where no last checkpoint was kept; ``trainer._checkpoint_connector._parse_ckpt_path``
takes ``ckpt_path=None``."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
import ember.lightning.pytorch as pl
from ember.lightning.pytorch.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from ember.lightning.pytorch.demos.boring_classes import BoringModel
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint as EmberModelCheckpoint

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False,
         "enable_model_summary": False, "logger": False}


class SlowDisk:
    """Every checkpoint write takes a while (on the background writer, which runs ``save_checkpoint`` wrappers)."""

    @ember.hookimpl(wrapper=True)
    def save_checkpoint(self, trainer: Any, checkpoint: Any, path: str) -> Any:
        time.sleep(0.3)
        return (yield)


# -- ReduceLROnPlateau and fit_loop.epoch_loop._get_monitor_value -----------------------------------------------
class PlateauModel(BoringModel):
    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().validation_step(batch, batch_idx)
        self.log("val_log", out["x"])
        return out

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return [optimizer], [{"scheduler": scheduler, "monitor": "val_log"}]


def test_plateau_scheduler_reads_its_monitor_through_the_epoch_loop(tmp_path: Path) -> None:
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=3, limit_train_batches=2, limit_val_batches=2,
                         enable_checkpointing=False, **QUIET)
    original = trainer.fit_loop.epoch_loop._get_monitor_value
    seen: dict[int, Any] = {}

    def recording(key: str) -> Any:
        value = original(key)
        seen[trainer.current_epoch] = (key, value)
        return value

    trainer.fit_loop.epoch_loop._get_monitor_value = recording
    trainer.fit(PlateauModel())
    assert sorted(seen) == [0, 1, 2]
    key, value = seen[2]
    assert key == "val_log" and torch.equal(value, trainer.callback_metrics["val_log"])


def test_plateau_scheduler_steps_with_what_the_replacement_answers(tmp_path: Path) -> None:
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=3, limit_train_batches=2, limit_val_batches=2,
                         enable_checkpointing=False, **QUIET)
    trainer.fit_loop.epoch_loop._get_monitor_value = lambda key: torch.tensor(1.0)  # never improves after the first
    model = PlateauModel()
    trainer.fit(model)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.best == 1.0 and scheduler.num_bad_epochs == 2


def test_plateau_scheduler_still_requires_a_logged_monitor(tmp_path: Path) -> None:
    class Unlogged(PlateauModel):
        def validation_step(self, batch: Any, batch_idx: int) -> Any:
            return BoringModel.validation_step(self, batch, batch_idx)

    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=1, limit_train_batches=2, limit_val_batches=2,
                         enable_checkpointing=False, **QUIET)
    with pytest.raises(ember.ConfigurationError, match="not available"):
        trainer.fit(Unlogged())


# -- a file still being written counts as taken -------------------------------------------------------------------
@pytest.mark.parametrize("callback_class", [ModelCheckpoint, EmberModelCheckpoint], ids=["lightning", "ember"])
def test_same_name_saved_while_the_first_is_written_gets_a_version(tmp_path: Path, callback_class: type) -> None:
    mc = callback_class(dirpath=str(tmp_path), filename="test", monitor="epoch", mode="max", save_top_k=-1,
                        save_last=False)
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=3, limit_train_batches=1, limit_val_batches=1,
                         callbacks=[mc], plugins=[SlowDisk()], **QUIET)
    trainer.fit(BoringModel())
    expected = ["test-v1.ckpt", "test-v2.ckpt", "test.ckpt"]
    assert sorted(os.listdir(tmp_path)) == expected
    assert sorted(os.path.basename(p) for p in mc.best_k_models) == expected
    epochs = {os.path.basename(p): torch.load(p, weights_only=True)["epoch"] for p in mc.best_k_models}
    assert epochs == {"test.ckpt": 0, "test-v1.ckpt": 1, "test-v2.ckpt": 2}


def test_a_second_fit_of_the_same_trainer_continues_the_versions(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=str(tmp_path), filename="test", monitor="epoch", save_top_k=-1)
    mc.STARTING_VERSION = 9
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=2, limit_train_batches=1, limit_val_batches=1,
                         callbacks=[mc], plugins=[SlowDisk()], **QUIET)
    trainer.fit(BoringModel())
    assert sorted(os.listdir(tmp_path)) == ["test-v9.ckpt", "test.ckpt"]
    trainer.fit_loop.max_epochs = 4
    trainer.fit(BoringModel())
    expected = ["test-v10.ckpt", "test-v11.ckpt", "test-v9.ckpt", "test.ckpt"]
    assert sorted(os.listdir(tmp_path)) == expected
    assert sorted(os.path.basename(p) for p in mc.best_k_models) == expected


def test_a_single_best_file_is_replaced_not_versioned(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=str(tmp_path), filename="model", monitor=None, save_top_k=1)
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=3, limit_train_batches=1, limit_val_batches=0,
                         callbacks=[mc], plugins=[SlowDisk()], **QUIET)
    trainer.fit(BoringModel())
    assert os.listdir(tmp_path) == ["model.ckpt"]
    assert torch.load(tmp_path / "model.ckpt", weights_only=True)["global_step"] == 3


# -- ckpt_path="last" and OnExceptionCheckpoint ---------------------------------------------------------------
class FailsInEpoch(BoringModel):
    def __init__(self, fail_epoch: int | None = None) -> None:
        super().__init__()
        self.fail_epoch = fail_epoch

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.current_epoch == self.fail_epoch and batch_idx == 1:
            raise RuntimeError("failing on purpose")
        return super().training_step(batch, batch_idx)


def _trainer(tmp_path: Path, save_last: bool, **kwargs: Any) -> Any:
    return pl.Trainer(default_root_dir=str(tmp_path), max_epochs=3, limit_train_batches=3, limit_val_batches=0,
                      callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ckpts"), save_last=save_last),
                                 OnExceptionCheckpoint(tmp_path / "ft")], **QUIET, **kwargs)


def test_last_resumes_from_the_exception_checkpoint_when_no_last_was_kept(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failing on purpose"):
        _trainer(tmp_path, save_last=False).fit(FailsInEpoch(fail_epoch=1))
    on_exception = str(tmp_path / "ft" / "on_exception.ckpt")
    assert os.path.isfile(on_exception)
    trainer = _trainer(tmp_path, save_last=False)
    trainer.fit(FailsInEpoch(), ckpt_path="last")
    assert trainer.ckpt_path == on_exception
    # the failed epoch starts again from the restored step (4: three of epoch 0, one of epoch 1)
    assert trainer.global_step == 4 + 2 * 3
    assert not os.path.exists(on_exception)  # a fit that ends normally removes it


def test_last_prefers_a_kept_last_checkpoint_to_the_exception_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failing on purpose"):
        _trainer(tmp_path, save_last=True).fit(FailsInEpoch(fail_epoch=1))
    assert os.path.isfile(tmp_path / "ft" / "on_exception.ckpt")
    trainer = _trainer(tmp_path, save_last=True)
    trainer.fit(FailsInEpoch(), ckpt_path="last")
    assert trainer.ckpt_path == str(tmp_path / "ckpts" / "last.ckpt")
    assert trainer.global_step == 9


def test_a_fit_without_ckpt_path_resumes_after_a_failed_fit(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failing on purpose"):
        _trainer(tmp_path, save_last=False).fit(FailsInEpoch(fail_epoch=1))
    on_exception = str(tmp_path / "ft" / "on_exception.ckpt")
    trainer = _trainer(tmp_path, save_last=False)
    with pytest.warns(UserWarning, match="an earlier fit failed and left .*on_exception.ckpt"):
        trainer.fit(FailsInEpoch())
    assert trainer.ckpt_path == on_exception and trainer.global_step == 4 + 2 * 3
    # the failure is behind: the next fit starts afresh, without a warning
    trainer = _trainer(tmp_path, save_last=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*earlier fit failed")
        trainer.fit(FailsInEpoch())
    assert trainer.ckpt_path is None and trainer.global_step == 9


def test_ckpt_path_current_trains_from_the_module_after_a_failed_fit(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failing on purpose"):
        _trainer(tmp_path, save_last=False).fit(FailsInEpoch(fail_epoch=1))
    trainer = _trainer(tmp_path, save_last=False)
    trainer.fit(FailsInEpoch(), ckpt_path="current")
    assert trainer.ckpt_path is None and trainer.global_step == 9


def test_parse_ckpt_path_last_names_the_exception_checkpoint(tmp_path: Path) -> None:
    ft = OnExceptionCheckpoint(tmp_path)
    Path(ft.ckpt_path).touch()
    trainer = pl.Trainer(default_root_dir=str(tmp_path), callbacks=[ModelCheckpoint(), ft], **QUIET)
    for fn in ("fit", "validate"):
        path = trainer._checkpoint_connector._parse_ckpt_path(fn, "last", model_provided=fn == "fit",
                                                              model_connected=True)
        assert path == str(tmp_path / "on_exception.ckpt")
    with pytest.warns(UserWarning, match="The last model of the previous `fit` call will be used"):
        path = trainer._checkpoint_connector._parse_ckpt_path("fit", None, model_provided=True, model_connected=True)
    assert path == str(tmp_path / "on_exception.ckpt")


def test_parse_ckpt_path_none(tmp_path: Path) -> None:
    trainer = pl.Trainer(default_root_dir=str(tmp_path), max_epochs=1, limit_train_batches=2, limit_val_batches=0,
                         **QUIET)
    connector = trainer._checkpoint_connector
    assert connector._parse_ckpt_path("fit", None, model_provided=True, model_connected=True) is None
    assert connector._parse_ckpt_path("validate", None, model_provided=False, model_connected=True) is None
    trainer.fit(BoringModel())
    best = trainer.checkpoint_callback.best_model_path
    assert best
    with pytest.warns(UserWarning, match="The best model of the previous `fit` call will be used"):
        path = connector._parse_ckpt_path("validate", None, model_provided=False, model_connected=True)
    assert path == best
