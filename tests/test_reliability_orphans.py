"""No orphans: the processes of a multi-process job die within seconds of their launcher, whatever kills it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from dist_support import SCRIPTS, Job, alive

#: The bounds the docs promise (docs/reliability.md), with slack for a busy two-core machine: after SIGKILL the
#: kernel ends the workers at once; after SIGTERM they finish their batch and write a checkpoint first.
BOUND = {signal.SIGKILL: 5.0, signal.SIGTERM: 15.0}


def started(job: Job, out: Path, timeout: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout
    while not all((out / f"pid{r}").exists() for r in range(2)):
        if job.proc.poll() is not None or time.monotonic() > deadline:
            job.kill_group()
            pytest.fail(f"the job never started training:\n{job.wait(5)[1]}")
        time.sleep(0.05)
    return [int((out / f"pid{r}").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, pytest.param(signal.SIGTERM, marks=pytest.mark.extended)])
def test_workers_die_with_their_launcher(tmp_path: Path, how: signal.Signals) -> None:
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "slow_ddp_job.py"),
               str(tmp_path)], cwd=tmp_path)
    pids = started(job, tmp_path)
    try:
        os.kill(job.proc.pid, how)  # the launcher alone, not its process group: as the OOM killer would
        killed = time.monotonic()
        while any(alive(pid) for pid in pids) and time.monotonic() - killed < 60:
            time.sleep(0.02)
        seconds = time.monotonic() - killed
        print(f"workers gone {seconds:.2f} s after the launcher got {how.name}")
        assert not [pid for pid in pids if alive(pid)], "orphaned workers"
        assert seconds < BOUND[how]
        if how == signal.SIGTERM:  # the launcher itself stopped in order and says so
            assert job.proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        job.kill_group()
        job.proc.communicate(timeout=30)
