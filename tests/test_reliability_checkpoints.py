"""Checkpoint policies delete only what is theirs: files this run wrote in its own directory, never the
file the run resumed from, never another run's files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from dist_support import needs_fsdp

import ember
from ember.plugins.callbacks import ModelCheckpoint
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def fit(folder: Path, max_epochs: int, ckpt_path: Any = None, **checkpoint: Any) -> ModelCheckpoint:
    callback = ModelCheckpoint(dirpath=folder, **checkpoint)
    trainer = ember.Trainer(max_epochs=max_epochs, default_root_dir=str(folder.parent), callbacks=[callback], **QUIET)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16), ckpt_path=ckpt_path)
    return callback


def files(folder: Path) -> set[str]:
    return {f for f in os.listdir(folder) if not f.startswith(".")}


@pytest.mark.parametrize("monitor", [None, "val_loss"])
def test_a_run_resumed_elsewhere_never_deletes_the_other_runs_files(tmp_path: Path, monitor: str | None) -> None:
    first = fit(tmp_path / "a", 2, save_top_k=1, monitor=monitor)
    before = files(tmp_path / "a")
    assert before == {Path(first.best_model_path).name, "last.ckpt"}
    with pytest.warns(UserWarning, match="The dirpath has changed"):  # another folder: the ranking starts afresh
        second = fit(tmp_path / "b", 5, ckpt_path=first.best_model_path, save_top_k=1, monitor=monitor)
    assert files(tmp_path / "a") == before  # untouched, though run b ranked better checkpoints since
    assert files(tmp_path / "b") == {Path(second.best_model_path).name, "last.ckpt"}  # b cleans up its own


def test_the_file_a_run_resumed_from_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    first = fit(folder, 2, save_top_k=1)  # keeps the newest
    resumed_from = first.best_model_path
    assert Path(resumed_from).name == "epoch=1-step=4.ckpt"
    second = fit(folder, 4, ckpt_path=resumed_from, save_top_k=1)
    assert Path(second.best_model_path).name == "epoch=3-step=8.ckpt"
    # epoch 2's file was this run's own and went; the file it resumed from stays
    assert files(folder) == {"epoch=1-step=4.ckpt", "epoch=3-step=8.ckpt", "last.ckpt"}


def test_a_continued_run_in_its_own_directory_still_rotates_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    fit(folder, 2, save_top_k=1)
    fit(folder, 4, ckpt_path="last", save_top_k=1)
    assert files(folder) == {"epoch=3-step=8.ckpt", "last.ckpt"}  # what an uninterrupted run leaves


def _small_disk(folder: Path) -> bool:
    import subprocess

    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_names_the_path_and_the_space_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    import subprocess

    import torch

    from ember.plugins.checkpoint_io.torch_file import atomic_save, safe_load

    folder = tmp_path / "small"
    if not _small_disk(folder):
        pytest.skip("needs a small file system: mounting a 512 KiB tmpfs is not permitted here")
    try:
        path = folder / "last.ckpt"
        small = {"w": torch.arange(1000.0)}
        atomic_save(small, str(path))
        big = {"w": torch.zeros(1 << 20)}  # 4 MiB
        with pytest.raises(ember.CheckpointError, match=rf"cannot write {path}: no space left on the device .* MiB "
                                                         r"free, the checkpoint needs about 4.0 MiB\). The previous "
                                                         r"file at this path, if any, is intact"):
            atomic_save(big, str(path))
        assert torch.equal(safe_load(str(path))["w"], small["w"])  # intact, and no temporary left behind
        assert sorted(os.listdir(folder)) == ["last.ckpt"]
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


# the callbacks' states are restored before configure_optimizers (Lightning's order), so ModelCheckpoint notes the
# other folder before the optimizer is found to differ
@pytest.mark.filterwarnings("ignore:ModelCheckpoint. The dirpath has changed:UserWarning")
def test_resuming_with_another_optimizer_fails_before_training_naming_the_groups(tmp_path: Path) -> None:
    import torch

    fit(tmp_path / "a", 1)

    class Adam(TinyClassifier):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    steps = []

    class Steps:
        def on_train_batch_start(self) -> None:
            steps.append(1)

    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), callbacks=[Steps()], **QUIET)
    with pytest.raises(ember.CheckpointError, match=r"parameter group 0 of optimizer 0 was saved without the "
                                                    r"settings \['amsgrad', 'betas', 'eps'\], which this run's Adam "
                                                    r"has.*SGD then, Adam now"):
        trainer.fit(Adam(), *tiny_loaders(n=16), ckpt_path=str(tmp_path / "a" / "last.ckpt"))
    assert steps == []  # refused before training


def test_non_finite_clip_values_and_empty_loaders_are_refused(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from ember.testing import tiny_dataset

    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ember.ConfigurationError, match=r"gradient_clip_val=.* expected a finite number >= 0"):
            ember.Trainer(gradient_clip_val=bad)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    empty = DataLoader(tiny_dataset(3), batch_size=4, drop_last=True)
    with pytest.raises(ember.ConfigurationError, match=r"empty training loader \(0 batches\)"):
        trainer.fit(TinyClassifier(), empty)


@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")])])
def test_a_nan_loss_is_flagged_once_with_its_step(tmp_path: Path, accelerator: str) -> None:
    import torch

    from ember.plugins.callbacks.loss_check import NonFiniteLossWarning

    class GoesNaN(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * float("nan") if self.trainer.global_step >= 3 else loss

    trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), log_every_n_steps=2,
                            accelerator=accelerator, **QUIET)
    with pytest.warns(NonFiniteLossWarning) as caught:
        trainer.fit(GoesNaN(), *tiny_loaders(n=32))
    assert len(caught) == 1  # once, not every step
    message = str(caught[0].message)
    assert "the training loss is nan at global step 4 (epoch 0, batch 3)" in message
    assert "callbacks=['nan-guard']" in message and "set_detect_anomaly" in message


def test_a_nan_loss_in_a_run_shorter_than_log_every_n_steps_is_flagged_at_the_end(tmp_path: Path) -> None:
    import torch

    from ember.plugins.callbacks.loss_check import NonFiniteLossWarning

    class GoesNaN(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * float("nan") if self.trainer.global_step >= 1 else loss

    trainer = ember.Trainer(max_steps=4, default_root_dir=str(tmp_path), log_every_n_steps=50, accelerator="cpu",
                            **QUIET)
    with pytest.warns(NonFiniteLossWarning) as caught:
        trainer.fit(GoesNaN(), *tiny_loaders(n=32))
    assert len(caught) == 1
    assert "the training loss is nan at global step 4 (epoch 0, batch 3)" in str(caught[0].message)


def test_detect_nonfinite_loss_false_switches_the_loss_check_off(tmp_path: Path) -> None:
    import warnings

    import torch

    class GoesNaN(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch, batch_idx) * float("nan")

    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), log_every_n_steps=1, accelerator="cpu",
                            detect_nonfinite_loss=False, **QUIET)
    assert "callback.loss-check" not in [identity for identity, _ in trainer.extra_plugins]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NonFiniteLossWarning (nor any other, but the machine's CPU count's)
        warnings.filterwarnings("ignore", message=".*does not have many workers")
        trainer.fit(GoesNaN(), *tiny_loaders(n=16))


@needs_fsdp
def test_a_full_disk_during_a_sharded_save_keeps_the_previous_one(tmp_path: Path) -> None:
    import subprocess

    import torch

    from ember.plugins.strategies import sharded_checkpoint

    folder = tmp_path / "small"
    if not _small_disk(folder):
        pytest.skip("needs a small file system: mounting a 512 KiB tmpfs is not permitted here")
    try:
        small = torch.nn.Linear(4, 4)
        path = folder / "sharded"
        sharded_checkpoint.save({"format_version": 2}, path, small, [])
        big = torch.nn.Linear(1024, 1024)  # 4 MiB of weights
        with pytest.raises(ember.CheckpointError, match=rf"cannot write {path}: no space left on the device"):
            sharded_checkpoint.save({"format_version": 2}, path, big, [])
        assert sorted(os.listdir(folder)) == ["sharded"]  # no half-written directory left
        loaded = sharded_checkpoint.load(path, torch.nn.Linear(4, 4))
        assert torch.equal(loaded["state_dict"]["weight"], small.weight)
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)
