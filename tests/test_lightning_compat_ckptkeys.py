"""What a checkpoint file holds as Lightning code reads it: ``lightning.fabric.utilities.cloud_io._load`` (a
weights-only read), Lightning's names for the states ember keeps under ``plugins`` (``callbacks[state_key]``, the
DataModule's class name) as the very same objects, Lightning's ``epoch``, and ``trainer._checkpoint_connector``.
Compared with Lightning 2.6 itself: tests/lightning/record_checkpoint_keys.py wrote checkpoint_keys.json."""

from __future__ import annotations

import io
import json
import os
import pathlib
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
import ember.lightning.pytorch as pl
from ember.core.checkpointing.checkpoint_format import take_names
from ember.core.errors import CheckpointError
from ember.lightning.fabric.utilities.cloud_io import _atomic_save, _load, get_filesystem
from ember.lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel
from ember.lightning.pytorch.trainer.states import TrainerFn
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.testing import TinyClassifier, tiny_loaders
from tests.lightning.record_checkpoint_keys import scenario

RECORD = json.loads((pathlib.Path(__file__).parent / "lightning" / "checkpoint_keys.json").read_text())["recorded"]
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}


@pytest.fixture(scope="module")
def ember_files() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scenario(pl, _load)


# -- the file, as Lightning records it -------------------------------------------------------------------------
def test_the_same_files_as_lightning(ember_files: dict[str, Any]) -> None:
    assert sorted(ember_files) == sorted(RECORD)


@pytest.mark.parametrize("name", sorted(RECORD))
def test_lightning_reads_what_it_reads_in_lightning(ember_files: dict[str, Any], name: str) -> None:
    ours, theirs = ember_files[name], RECORD[name]
    # every key Lightning writes but its version stamp (ember's is ember_version) and the loops' own record
    assert set(theirs["keys"]) - {"pytorch-lightning_version"} <= set(ours["keys"])
    assert ours["callbacks"] == theirs["callbacks"]  # each callback's state_key, the default one included
    assert set(theirs["checkpoint state"]) <= set(ours["checkpoint state"])
    for key in ("datamodule", "epoch", "global_step", "scheduler step count", "hyper_parameters",
                "optimizer_states", "dirpath is the callback's"):
        assert ours[key] == theirs[key], key
    assert ours["current_score"] == pytest.approx(theirs["current_score"])


# -- one state, two names ----------------------------------------------------------------------------------------
def _fit(tmp_path: Path, callbacks: list[Any], **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), num_sanity_val_steps=0, **QUIET,
                            callbacks=callbacks, **kwargs)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=32))
    return trainer


@pytest.mark.parametrize("how", ["serialised", "snapshot", "process", "synchronous"])
def test_lightning_names_are_the_plugins_states_themselves(tmp_path: Path, how: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.core.checkpointing import checkpoint_writes
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    if how == "snapshot":  # a checkpoint too large to serialise on the training thread
        monkeypatch.setattr(checkpoint_writes, "SERIALIZE_INLINE_BYTES", 0)
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss")
    io_plugin = TorchCheckpointIO(async_save=how != "synchronous", writer="process" if how == "process" else "thread")
    _fit(tmp_path, [mc], checkpoint_io=io_plugin)
    ckpt = safe_load(str(tmp_path / "ck" / "last.ckpt"))
    key = mc.state_key
    assert ckpt["callbacks"][key] is ckpt["plugins"][key]  # written once, read back as one object
    assert ckpt["callbacks"][key]["best_model_path"] == mc.best_model_path


def test_the_names_are_walked_once_and_put_back() -> None:
    state = {"a": 1}
    checkpoint = {"plugins": {"callback.x": state, "datamodule": {"n": 2}}, "callbacks": {"X": state, "mine": {}},
                  "Data": None, "global_step": 1}
    checkpoint["Data"] = checkpoint["plugins"]["datamodule"]
    taken = take_names(checkpoint)
    assert checkpoint["callbacks"] == {"mine": {}} and "Data" not in checkpoint  # a hook's own entry stays
    assert sorted(taken, key=str) == sorted([("callbacks", "X", "callback.x"), (None, "Data", "datamodule")], key=str)


def test_a_callback_with_the_default_state_key_is_named_by_its_class(tmp_path: Path) -> None:
    class Counter(ember.Callback):
        def state_dict(self) -> dict[str, Any]:
            return {"count": 3}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.loaded = state

    _fit(tmp_path, [Counter(), ModelCheckpoint(dirpath=tmp_path / "ck")])
    ckpt = safe_load(str(tmp_path / "ck" / "last.ckpt"))
    ember_key = next(k for k, v in ckpt["plugins"].items() if v == {"count": 3})
    assert ember_key != Counter.__qualname__  # ember keeps it under its identity (two of a class stay apart)
    assert ckpt["callbacks"][Counter.__qualname__] is ckpt["plugins"][ember_key]
    restored = Counter()  # resuming reads ember's key, as before
    trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[restored, ModelCheckpoint(dirpath=tmp_path / "ck")])
    trainer.fit(TinyClassifier(), *tiny_loaders(n=32), ckpt_path=str(tmp_path / "ck" / "last.ckpt"))
    assert restored.loaded == {"count": 3}


def test_the_epoch_of_a_checkpoint_is_the_epoch_that_saved_it(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1, filename="{epoch}")
    trainer = _fit(tmp_path, [mc])
    for epoch in (0, 1):
        ckpt = safe_load(str(tmp_path / "ck" / f"epoch={epoch}.ckpt"))
        assert ckpt["epoch"] == epoch  # Lightning's: the epoch that asked for the save
        assert ckpt["loops"]["fit"]["epoch"] == epoch + 1  # where a resumed fit starts, as before
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert safe_load(str(tmp_path / "after.ckpt"))["epoch"] == trainer.current_epoch == 2


def test_a_format_2_file_without_the_names_still_resumes(tmp_path: Path) -> None:
    mc = ModelCheckpoint(dirpath=tmp_path / "ck")
    _fit(tmp_path, [mc])
    path = tmp_path / "ck" / "last.ckpt"
    ckpt = safe_load(str(path))
    del ckpt["callbacks"]  # what ember wrote before
    torch.save(ckpt, path)
    again = ModelCheckpoint(dirpath=tmp_path / "ck")
    trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), **QUIET, callbacks=[again])
    trainer.fit(TinyClassifier(), *tiny_loaders(n=32), ckpt_path=str(path))
    assert trainer.global_step == 12 and again.best_model_path


def test_resume_is_still_exact(tmp_path: Path) -> None:
    def run(epochs: int, folder: str, ckpt_path: str | None = None) -> ember.Trainer:
        ember.seed_everything(3)
        trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), **QUIET,
                                callbacks=[ModelCheckpoint(dirpath=tmp_path / folder)])
        model = TinyClassifier()
        trainer.fit(model, *tiny_loaders(n=32), ckpt_path=ckpt_path)
        return trainer

    whole = run(3, "whole")
    run(1, "parts")
    resumed = run(3, "parts", str(tmp_path / "parts" / "last.ckpt"))
    for a, b in zip(whole.module.state_dict().values(), resumed.module.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# -- cloud_io ------------------------------------------------------------------------------------------------------
def test_load_reads_paths_files_and_fsspec_urls(tmp_path: Path) -> None:
    path = tmp_path / "x.ckpt"
    _atomic_save({"w": torch.ones(2), "step": 3}, path)
    assert _load(path)["step"] == 3 and _load(str(path))["step"] == 3
    with open(path, "rb") as f:
        assert torch.equal(_load(f)["w"], torch.ones(2))
    assert _load(path, map_location=lambda storage, loc: storage)["step"] == 3
    _atomic_save({"step": 4}, "memory://ckptkeys/x.ckpt")
    assert _load("memory://ckptkeys/x.ckpt") == {"step": 4}
    assert get_filesystem(path).exists(str(path))


class _Code:
    def __reduce__(self) -> Any:
        return (os.getcwd, ())


def test_load_runs_nothing_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "code.ckpt"
    torch.save({"x": _Code()}, path)
    with pytest.raises(CheckpointError, match="weights-only load refuses"):
        _load(path)
    with pytest.raises(CheckpointError, match="weights_only=True"):
        _load(io.BytesIO(path.read_bytes()))
    _atomic_save({"x": _Code()}, "memory://ckptkeys/code.ckpt")
    with pytest.raises(CheckpointError, match="Nothing in it was run"):
        _load("memory://ckptkeys/code.ckpt")


# -- trainer._checkpoint_connector -----------------------------------------------------------------------------
def test_checkpoint_connector(tmp_path: Path) -> None:
    class Data(BoringDataModule):
        def state_dict(self) -> dict[str, Any]:
            return {"my": "state"}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.loaded = state

    dm = Data()
    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                         **QUIET, callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path)])
    trainer.fit(BoringModel(), datamodule=dm)
    path = trainer.checkpoint_callback.best_model_path
    assert torch.load(path, weights_only=True)[Data.__qualname__] == {"my": "state"}
    for fn in TrainerFn:
        trainer.state.fn = fn
        dm.loaded = None
        trainer._checkpoint_connector._restore_modules_and_callbacks(path)
        assert dm.loaded == {"my": "state"}
    dumped = trainer._checkpoint_connector.dump_checkpoint()
    assert type(dumped["hyper_parameters"]) is dict if "hyper_parameters" in dumped else True
    assert dumped["global_step"] == 2 and Data.__qualname__ in dumped
    weights = tmp_path / "weights.ckpt"
    trainer.save_checkpoint(weights, weights_only=True)
    with pytest.raises(KeyError, match="checkpoint contains only the model"):
        trainer._checkpoint_connector.restore(weights)


def test_best_under_fast_dev_run_asks_for_a_path() -> None:
    trainer = pl.Trainer(fast_dev_run=True, **QUIET)
    with pytest.raises(ValueError, match=r"with `fast_dev_run=True`. .* pass an exact checkpoint path"):
        trainer._checkpoint_connector._parse_ckpt_path(TrainerFn.TESTING, "best", model_provided=False,
                                                       model_connected=True)


def test_lightning_model_checkpoint_scores_are_tensors_of_the_logged_dtype(tmp_path: Path) -> None:
    class Model(BoringModel):
        def training_step(self, *args: Any) -> Any:
            self.log("foo", (self.current_epoch + 1) / 10)
            return super().training_step(*args)

    mc = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_top_k=3, monitor="foo", mode="min")
    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=3, limit_train_batches=1, limit_val_batches=1,
                         callbacks=[mc], **QUIET)
    trainer.fit(Model())
    assert mc.current_score == 0.3 and mc.current_score.dtype == torch.float32  # the float32 value logged
    assert mc.best_model_score == 0.1
    scores = sorted(float(torch.load(p, weights_only=True)["callbacks"][mc.state_key]["current_score"])
                    for p in tmp_path.glob("*.ckpt"))
    assert scores == pytest.approx([0.1, 0.2, 0.3])
    ember_own = ModelCheckpoint(dirpath=tmp_path / "e", monitor="foo")  # ember's callback keeps floats
    pl.Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1,
               callbacks=[ember_own], **QUIET).fit(Model())
    assert type(ember_own.current_score) is float
