"""One checkpoint path, two forms: a single file (one process, DDP) and a sharded directory (FSDP). A run that
writes one form where an earlier run in the same folder left the other (``last.ckpt``, overwritten in place)
replaces it; a directory that is not a checkpoint is never replaced; reading a sharded directory in a run that
does not shard says how to proceed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, needs_fsdp, run

import ember
from ember.plugins._shared.checkpoint_files import atomic_link, atomic_save, safe_load
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders


def _sharded(path: Path, value: float = 1.0) -> None:
    from ember.plugins.strategies import sharded_checkpoint

    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, value)
    sharded_checkpoint.save({"format_version": 2}, path, model, [])


def _entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@needs_fsdp
@pytest.mark.parametrize("write", ["save", "link"])
def test_a_file_written_where_a_sharded_checkpoint_is_replaces_it(tmp_path: Path, write: str) -> None:
    last = tmp_path / "last.ckpt"
    _sharded(last)
    source = tmp_path / "epoch=0.ckpt"
    atomic_save({"step": 3}, str(source))
    if write == "save":
        atomic_save({"step": 3}, str(last))
    else:
        atomic_link(str(source), str(last))
    assert last.is_file()
    assert safe_load(str(last)) == {"step": 3}
    assert _entries(tmp_path) == ["epoch=0.ckpt", "last.ckpt"]  # the old directory is gone, nothing hidden left


@needs_fsdp
def test_a_sharded_checkpoint_written_where_a_file_is_replaces_it(tmp_path: Path) -> None:
    from ember.plugins.strategies import sharded_checkpoint

    last = tmp_path / "last.ckpt"
    atomic_save({"step": 3}, str(last))
    _sharded(last, value=2.0)
    assert sharded_checkpoint.is_sharded(last)
    assert _entries(tmp_path) == ["last.ckpt"]  # no last.ckpt.old left behind
    loaded = sharded_checkpoint.load(last, torch.nn.Linear(2, 2))
    assert torch.equal(loaded["state_dict"]["weight"], torch.full((2, 2), 2.0))


def test_a_directory_that_is_not_a_checkpoint_is_never_replaced(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    last.mkdir()
    (last / "notes.txt").write_text("mine")
    with pytest.raises(ember.CheckpointError, match=rf"cannot write the checkpoint file {last}: a directory .* in the "
                                                    r"way, .*not a checkpoint.* Move or remove it"):
        atomic_save({"step": 3}, str(last))
    assert (last / "notes.txt").read_text() == "mine"
    assert _entries(tmp_path) == ["last.ckpt"]  # no temporary file left either


@needs_fsdp
def test_a_sharded_save_never_replaces_a_directory_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    last.mkdir()
    (last / "notes.txt").write_text("mine")
    with pytest.raises(ember.CheckpointError, match=r"cannot write the sharded checkpoint .*not a checkpoint"):
        _sharded(last)
    assert _entries(last) == ["notes.txt"]
    assert _entries(tmp_path) == ["last.ckpt"]


@needs_fsdp
def test_resuming_a_run_that_does_not_shard_from_a_sharded_checkpoint_says_how(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    _sharded(last)
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    with pytest.raises(ember.CheckpointError) as info:
        trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0], ckpt_path=str(last))
    message = str(info.value)
    assert str(last) in message and "sharded checkpoint" in message
    assert "Trainer(strategy='fsdp')" in message and f"ember consolidate {last} " in message


def _job(out: Path, strategy: str, epochs: int, *ckpt_path: str) -> dict:
    run([sys.executable, str(SCRIPTS / "last_ckpt_job.py"), str(out), strategy, str(epochs), *ckpt_path], cwd=out,
        timeout=240)
    return json.loads((out / f"{strategy}-rank0.json").read_text())


@pytest.mark.slow
@pytest.mark.extended  # two strategies in turn; each one's checkpoints are held by tests/test_distributed_resume.py
@needs_fsdp
def test_ddp_and_fsdp_runs_take_turns_in_one_checkpoint_folder(tmp_path: Path) -> None:
    """FSDP leaves a sharded last.ckpt; a DDP run in the same folder replaces it with a file (it stopped with
    IsADirectoryError at its first save); an FSDP run resumes from that file and writes a directory again."""
    from ember.plugins.strategies import sharded_checkpoint

    folder = tmp_path / "checkpoints"
    last = folder / "last.ckpt"
    assert _job(tmp_path, "fsdp", 1) == {"start": 0, "end": 4}
    assert sharded_checkpoint.is_sharded(last)
    assert _job(tmp_path, "ddp", 1) == {"start": 0, "end": 4}
    assert last.is_file() and safe_load(str(last))["global_step"] == 4
    assert _job(tmp_path, "fsdp", 2, "last") == {"start": 4, "end": 8}  # resumed from the DDP run's file
    assert sharded_checkpoint.is_sharded(last)
    assert not [name for name in _entries(folder) if name.startswith(".") or name.endswith(".old")]
