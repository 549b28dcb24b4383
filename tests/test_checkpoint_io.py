"""``checkpoint_io.torch``: atomic writes, and every kind of bad file failing clearly without running code."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.core.checkpointing.checkpoint import FORMAT_VERSION
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO, atomic_save, safe_load
from ember.testing import TinyClassifier, tiny_loaders

MARKER_ENV = "EMBER_TEST_MARKER"

#: No progress bar, model summary or logger files: only what the test is about.
QUIET = {"accelerator": "cpu",
         "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}



def _touch_marker() -> None:  # what a malicious pickle would run
    Path(os.environ[MARKER_ENV]).write_text("code ran")


class Payload:
    def __reduce__(self) -> Any:
        return (_touch_marker, ())


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "marker"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A real checkpoint of a short fit."""
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET,
                            enable_checkpointing=False)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    path = tmp_path / "good.ckpt"
    trainer.save_checkpoint(path)
    return path


def fit_from(path: Path, tmp_path: Path, **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET,
                            enable_checkpointing=False)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16), ckpt_path=str(path), **kwargs)
    return trainer


def test_atomic_save_replaces_whole_file_and_leaves_no_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "x.ckpt"
    atomic_save({"a": torch.arange(3)}, str(path))
    atomic_save({"a": torch.arange(5)}, str(path))
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.arange(5))
    assert os.listdir(path.parent) == ["x.ckpt"]


def test_failed_save_keeps_previous_checkpoint_and_removes_its_temporary(tmp_path: Path) -> None:
    path = tmp_path / "x.ckpt"
    atomic_save({"a": torch.arange(3)}, str(path))
    before = path.read_bytes()

    class Unsaveable:
        def __reduce__(self) -> Any:
            raise RuntimeError("cannot pickle this")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        atomic_save({"a": torch.arange(4), "b": Unsaveable()}, str(path))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.ckpt"]


def test_temporary_of_a_dead_writer_is_cleaned_by_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    import socket

    host = socket.gethostname().replace(".", "_")
    stale = tmp_path / f".last.ckpt.{host}-999999999-abcd1234.tmp"  # no such process
    stale.write_bytes(b"PK\x03\x04half")
    foreign = tmp_path / ".last.ckpt.otherhost-1-abcd1234.tmp"  # another host's: not ours to judge
    foreign.write_bytes(b"x")
    atomic_save({"a": 1}, str(path))
    assert not stale.exists()
    assert foreign.exists()


def test_good_checkpoint_loads_with_weights_only(good: Path) -> None:
    checkpoint = safe_load(str(good))
    assert checkpoint["format_version"] == FORMAT_VERSION
    assert checkpoint["kind"] == "full"
    # A plain torch.load with weights_only=True reads it too: nothing but tensors and containers.
    assert torch.load(good, weights_only=True)["global_step"] == checkpoint["global_step"] == 2


def test_truncated_file_fails_clearly(good: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.ckpt"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ember.CheckpointError, match=r"cut\.ckpt is truncated"):
        fit_from(cut, tmp_path)


def test_random_bytes_fail_clearly(tmp_path: Path) -> None:
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(bytes(range(7, 256)) * 8)
    with pytest.raises(ember.CheckpointError, match=r"junk\.ckpt is not a checkpoint: .*starts with the bytes 07 08"):
        fit_from(junk, tmp_path)


def test_empty_and_missing_files_fail_clearly(tmp_path: Path) -> None:
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(ember.CheckpointError, match=r"empty\.ckpt is empty \(0 bytes\)"):
        fit_from(empty, tmp_path)
    with pytest.raises(ember.CheckpointError, match=r"no checkpoint at .*nothing\.ckpt"):
        fit_from(tmp_path / "nothing.ckpt", tmp_path)


def test_damaged_zip_member_fails_clearly(good: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.ckpt"
    data = bytearray(good.read_bytes())
    for i in range(100, 400):  # inside the first member's data, central directory intact
        data[i] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert zipfile.is_zipfile(damaged)
    with pytest.raises(ember.CheckpointError, match=r"damaged\.ckpt is damaged"):
        fit_from(damaged, tmp_path)


def test_bare_pickle_with_code_is_refused_without_running_it(tmp_path: Path, marker: Path) -> None:
    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps({"state_dict": Payload()}))
    with pytest.raises(ember.CheckpointError, match=r"evil\.ckpt is a bare pickle file"):
        fit_from(evil, tmp_path)
    with pytest.raises(ember.CheckpointError, match="bare pickle"):
        TinyClassifier.load_from_checkpoint(evil)
    assert not marker.exists()


def test_torch_file_with_code_is_refused_without_running_it(tmp_path: Path, marker: Path) -> None:
    evil = tmp_path / "evil.ckpt"
    torch.save({"format_version": 1, "state_dict": {}, "payload": Payload()}, evil)
    with pytest.raises(ember.CheckpointError, match=r"evil\.ckpt holds Python objects .*_touch_marker.*Nothing "
                                                    r"in it was run.*weights_only=False"):
        fit_from(evil, tmp_path)
    with pytest.raises(ember.CheckpointError, match="weights-only load refuses"):
        TinyClassifier.load_from_checkpoint(evil)
    assert not marker.exists()


def test_unsafe_loading_is_an_explicit_opt_in(good: Path, tmp_path: Path, marker: Path) -> None:
    trusted = tmp_path / "trusted.ckpt"
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["hyper_parameters"] = {}
    checkpoint["extra"] = Payload()
    torch.save(checkpoint, trusted)
    with pytest.raises(ember.CheckpointError):
        fit_from(trusted, tmp_path)
    assert not marker.exists()
    with pytest.warns(UserWarning, match=r"trusted\.ckpt with weights_only=False: any code pickled in this file runs"):
        trainer = fit_from(trusted, tmp_path, weights_only=False)
    assert marker.exists()  # the caller asked for it, and was warned loudly
    assert trainer.global_step == 4


def test_newer_format_fails_clearly(good: Path, tmp_path: Path) -> None:
    newer = tmp_path / "newer.ckpt"
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["format_version"] = FORMAT_VERSION + 1
    checkpoint["ember_version"] = "9.0.0"
    torch.save(checkpoint, newer)
    message = rf"newer\.ckpt was written in checkpoint format {FORMAT_VERSION + 1} \(by ember 9\.0\.0\).*Upgrade"
    with pytest.raises(ember.CheckpointError, match=message):
        fit_from(newer, tmp_path)
    with pytest.raises(ember.CheckpointError, match=message):
        TinyClassifier.load_from_checkpoint(newer)


def test_foreign_files_fail_clearly(tmp_path: Path) -> None:
    bare = tmp_path / "bare.pt"
    torch.save(TinyClassifier().state_dict(), bare)
    with pytest.raises(ember.CheckpointError, match=r"bare\.pt is not an ember checkpoint but a bare state_dict "
                                                    r"of 4 tensors.*load_state_dict"):
        fit_from(bare, tmp_path)
    other = tmp_path / "other.pt"
    torch.save({"model": 1, "epoch": 3}, other)
    with pytest.raises(ember.CheckpointError, match=r"other\.pt is not an ember checkpoint: it has no "
                                                    r"'format_version' entry \(its keys: epoch, model\)"):
        fit_from(other, tmp_path)
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.ones(2), tensor)
    with pytest.raises(ember.CheckpointError, match=r"holds a Tensor, not a dict"):
        fit_from(tensor, tmp_path)


def test_lightning_checkpoint_loads_weights_but_cannot_resume(tmp_path: Path) -> None:
    model = TinyClassifier(hidden=5)
    path = tmp_path / "lightning.ckpt"
    torch.save({"pytorch-lightning_version": "2.4.0", "state_dict": model.state_dict(),
                "hyper_parameters": {"hidden": 5}, "epoch": 3}, path)
    loaded = TinyClassifier.load_from_checkpoint(path, hidden=5)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values(),
                                                 strict=True))
    with pytest.raises(ember.CheckpointError, match="PyTorch Lightning checkpoint, which cannot resume"):
        fit_from(path, tmp_path)


def test_state_that_weights_only_could_not_read_back_fails_at_save_time(tmp_path: Path) -> None:
    class Table:
        pass

    class Stateful:
        identity = "callback.stateful"

        def on_save_checkpoint(self, checkpoint: dict) -> None:
            checkpoint["plugins"][self.identity] = {"rows": [1, 2], "table": Table()}

    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[Stateful()], enable_checkpointing=False)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    with pytest.raises(ember.CheckpointError, match=r"checkpoint\['plugins'\]\['callback.stateful'\]\['table'\] "
                                                    r"\(a .*Table\)"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


def test_storage_plugin_is_a_selectable_role(tmp_path: Path) -> None:
    writes: list[str] = []

    class Recording(TorchCheckpointIO):
        identity = "checkpoint_io.recording"

        @ember.hookimpl
        def save_checkpoint(self, trainer: Any, checkpoint: dict, path: str) -> bool:
            writes.append(os.path.basename(path))
            return super().save_checkpoint(trainer, checkpoint, path)

    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET,
                            checkpoint_io=Recording())
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert trainer.role_identities["checkpoint_io"] == "checkpoint_io.recording"
    assert writes == ["epoch=0-step=2.ckpt", "last.ckpt", "epoch=1-step=4.ckpt", "last.ckpt"]
    with pytest.raises(ember.UnknownPluginError, match="unknown checkpoint_io 'tensorstore'.*torch"):
        ember.Trainer(accelerator="cpu", checkpoint_io="tensorstore")


def test_legacy_torch_format_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"x": torch.ones(1)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(ember.CheckpointError, match=r"legacy\.pt is in torch's legacy \(pre-1.6\) file format"):
        safe_load(str(path))
