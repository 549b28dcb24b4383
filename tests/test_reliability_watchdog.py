"""The hang watchdog: one of two gloo processes sleeps in its training step; every process stops with an error
naming it, its last global step and the hook it was in, within a few seconds of the configured timeout."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from dist_support import SCRIPTS, Job

import ember
from ember.plugins.callbacks.hang_watchdog import GRACE, timeout_seconds

TIMEOUT = 5.0  # generous: a busy two-core machine must not look like a hang


_TORCH = tuple(int(p) for p in __import__("torch").__version__.split("+")[0].split(".")[:2])


@pytest.mark.slow
@pytest.mark.parametrize("stuck", [0, pytest.param(1, marks=pytest.mark.extended)])
def test_a_stuck_rank_is_named_and_every_rank_stops(tmp_path: Path, stuck: int) -> None:
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "slow_ddp_job.py"),
               str(tmp_path), str(stuck), json.dumps({"hang_timeout": TIMEOUT})], cwd=tmp_path)
    code, out = job.wait(timeout=120)
    ended = time.time()
    assert code == 1, out
    seconds = ended - float((tmp_path / "stuck").read_text())
    print(f"rank {stuck} stuck: the job ended {seconds:.1f} s later (hang_timeout={TIMEOUT:g} s)")
    other = 1 - stuck
    expected = (f"rank {stuck} made no progress for 5 s at global step 3, in training_step "
                f"({SCRIPTS / 'slow_ddp_job.py'}:")
    summary = out[out.index("ember run: "):]
    first = summary.splitlines()[0]
    assert "HangError: rank " in first and expected in first, out  # the stuck rank is named: step, hook, line
    # the waiting rank is said to wait; on a loaded machine, when both stood still at the same count, the verdict
    # names both as suspects instead (it cannot tell them apart then)
    assert f"ranks [{other}] wait for it" in first or f"rank {other} made no progress" in first, out
    tie = f"ranks [{other}] wait for it" not in first
    if _TORCH >= (2, 13) and not tie:  # torch 2.4's agent keeps only the failure that came first (the waiting one)
        assert first.startswith(f"ember run: rank {stuck} "), out
        assert f"rank {other}: HangError: rank {stuck} made no progress" in summary  # every process stopped with it
    assert seconds < TIMEOUT + GRACE + 10  # detection within about a heartbeat of the timeout, then the exit


@pytest.mark.slow
@pytest.mark.extended  # the other timeout of the stuck-rank test above
def test_the_stuck_rank_is_named_when_the_collective_timeout_is_the_shorter(tmp_path: Path) -> None:
    """hang_timeout stays at its default (600 s); the process group's collectives time out after 12 s. The
    watchdog decides first (at 0.7 of it), so rank 0, waiting in a collective, is not the one blamed."""
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "slow_ddp_job.py"),
               str(tmp_path), "1", json.dumps({"collective_timeout": 12})], cwd=tmp_path)
    code, out = job.wait(timeout=120)
    assert code == 1, out
    first = out[out.index("ember run: "):].splitlines()[0]
    assert "HangError: rank 1 made no progress for 8.4 s at global step 3, in training_step" in first, out
    assert "Timed out waiting" not in first, out


def test_the_timeout_is_validated() -> None:
    assert timeout_seconds(None) is None and timeout_seconds(0) is None and timeout_seconds(2.5) == 2.5
    for bad in (-1, float("nan"), "soon", True):
        with pytest.raises(ember.ConfigurationError, match="hang_timeout"):
            ember.Trainer(hang_timeout=bad)


def test_a_single_process_run_has_no_watchdog_thread(tmp_path: Path) -> None:
    import threading

    from ember.testing import TinyClassifier, tiny_loaders

    seen = []

    class Probe:
        def on_train_batch_end(self) -> None:
            seen.append(sorted(t.name for t in threading.enumerate()))

    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, default_root_dir=str(tmp_path), logger=False,
                            enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, callbacks=[Probe()])
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert seen and not any("ember-hang-watchdog" in names for names in seen)
