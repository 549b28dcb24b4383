"""Checkpoints and exact resume under DDP and FSDP: 2 processes on gloo, a checkpoint in the middle of an
epoch, shuffled data and per-rank dropout; the resumed run ends with the very same weights."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, Job, clean_env, fsdp_available, needs_fsdp, once_per_session, run

pytest.importorskip("ember.core.checkpointing.checkpoint", reason="needs ember's checkpoint support")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resume_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict]:
    out = once_per_session(tmp_path_factory, "resume", lambda out: run(
        [sys.executable, str(SCRIPTS / "resume_job.py"), str(out)], cwd=out, timeout=240,
        env=clean_env(EMBER_TEST_FSDP="1" if fsdp_available() else "0")))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) | json.loads((out / f"exit-rank{r}.json").read_text())
             for r in range(2)]
    return ranks, torch.load(out / "weights.pt", weights_only=True)


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key}: max difference {(a[key] - b[key]).abs().max()}"


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp", marks=needs_fsdp)])
def test_resuming_mid_epoch_gives_the_same_weights(resume_job: tuple, strategy: str) -> None:
    ranks, weights = resume_job
    assert all(r[f"{strategy}_resumed_from_step"] for r in ranks)
    _equal(weights[f"{strategy}_resumed"], weights[f"{strategy}_full"])


def test_ddp_checkpoints_are_written_by_rank_zero_alone(resume_job: tuple) -> None:
    ranks, _ = resume_job
    assert [r["ddp_writes_reached"] for r in ranks] == [1, 0]
    assert ranks[0]["ddp_files"] == ["ddp-mid.ckpt"]  # one file, no temporary left over


@needs_fsdp
def test_fsdp_checkpoints_are_written_by_every_rank_as_shards(resume_job: tuple) -> None:
    ranks, _ = resume_job
    assert [r["fsdp_writes_reached"] for r in ranks] == [0, 0]  # the strategy writes the shards itself
    assert ranks[0]["fsdp_files"] == ["ddp-mid.ckpt", "fsdp-mid.ckpt"]


def test_process_group_threads_are_joined_before_the_interpreter_shuts_down(resume_job: tuple) -> None:
    """The trainers and models are still held at exit; ember's exit handler frees the group all the same, so no
    backend thread is left to need the GIL while the interpreter shuts down (where it would abort the process)."""
    ranks, _ = resume_job
    if ranks[0]["threads"] is None:
        pytest.skip("threads are read from /proc (Linux)")
    assert [r["threads"] for r in ranks] == [[], []]


@needs_fsdp
def test_a_consolidated_checkpoint_resumes_a_sharded_run(resume_job: tuple) -> None:
    _, weights = resume_job
    _equal(weights["fsdp_from_whole"], weights["fsdp_full"])


@needs_fsdp
def test_gradients_carried_by_a_sharded_checkpoint_are_sharded_too(resume_job: tuple) -> None:
    ranks, weights = resume_job
    assert ranks[0]["manual_saved_grads"] == ["grads.head.bias", "grads.head.weight", "grads.inp.bias",
                                              "grads.inp.weight", "grads.layers.0.bias", "grads.layers.0.weight"]
    _equal(weights["manual_resumed"], weights["manual_full"])
    # written in the background on every process, from the shards each copied at the safe point
    assert [r["manual_save_threads"] for r in ranks] == [["ember-checkpoint-writer"]] * 2


@needs_fsdp
def test_sigkill_during_a_background_sharded_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    from ember.plugins.strategies import sharded_checkpoint

    # The third directory written in the background is epoch 1's: epoch 0 wrote its own and last.ckpt.
    job = Job([sys.executable, str(SCRIPTS / "sharded_kill_job.py"), str(tmp_path), "3"], cwd=tmp_path)
    markers = [tmp_path / f"hanging-rank{r}" for r in range(2)]
    deadline = time.monotonic() + 150
    while not all(m.exists() for m in markers) and job.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    job.kill_group()  # SIGKILL to the launcher and both ranks, their writer threads in the middle of a save
    code, out = job.wait(timeout=30)
    assert all(m.exists() for m in markers), out[-3000:]
    assert [m.read_text() for m in markers] == ["ember-checkpoint-writer"] * 2
    folder = tmp_path / "ckpt"
    names = sorted(os.listdir(folder))
    assert [n for n in names if ".tmp-" in n] and "epoch=1-step=16.ckpt" not in names  # the half-done save
    assert sharded_checkpoint.is_sharded(folder / "last.ckpt") and "epoch=0-step=8.ckpt" in names
    whole = torch.load(sharded_checkpoint.consolidate(folder / "last.ckpt", tmp_path / "whole.ckpt"),
                       weights_only=True)
    assert whole["global_step"] == 8  # the previous checkpoint (epoch 0's end), complete
