"""Checkpoint policies delete only what is theirs: files this run wrote in its own directory, never the
file the run resumed from, never another run's files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

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
