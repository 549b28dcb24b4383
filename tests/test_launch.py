"""Launching and failing: two "nodes" on loopback with torchrun, and a rank that raises mid-training."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, Job, alive, clean_env, free_port, load_script

#: --kill-timeout given to `ember run` below: seconds between SIGTERM and SIGKILL for the other processes.
KILL_TIMEOUT = 2
#: Slack on top of the documented bound (monitor interval + kill timeout) for interpreters to exit on a
#: busy two-core machine.
SLACK = 20

@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in this process write their logs and checkpoints under the test's own directory."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow
def test_two_nodes_on_loopback_with_torchrun(tmp_path: Path) -> None:
    port, run_id = free_port(), uuid.uuid4().hex[:8]
    jobs = [Job([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                 "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                 "--max-restarts", "0", str(SCRIPTS / "nodes_job.py"), str(tmp_path)], cwd=tmp_path)
            for _ in range(2)]
    outputs = [job.wait(timeout=150) for job in jobs]
    for code, out in outputs:
        assert code == 0, out
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert sorted(r["node_rank"] for r in ranks) == [0, 1]  # the rendezvous numbered the nodes
    for r in ranks:
        assert r["world_size"] == 2 and r["local_rank"] == 0
        assert r["roles"]["environment"] == "environment.torchrun"
        assert r["roles"]["strategy"] == "strategy.ddp"  # picked by "auto" under torchrun
    model, _ = load_script("nodes_job.py").fit(8, strategy="single_device")
    weights = torch.load(tmp_path / "weights.pt", weights_only=True)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_processes_started_by_hand(tmp_path: Path) -> None:
    """No launcher at all: WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT set by hand (environment.local)."""
    port = str(free_port())
    jobs = [Job([sys.executable, str(SCRIPTS / "nodes_job.py"), str(tmp_path)], cwd=tmp_path,
                env=clean_env(WORLD_SIZE="2", RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
            for rank in range(2)]
    for job in jobs:
        code, out = job.wait(timeout=120)
        assert code == 0, out
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["global_rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert all(r["roles"]["environment"] == "environment.local" and r["roles"]["strategy"] == "strategy.ddp"
               for r in ranks)
    model, _ = load_script("nodes_job.py").fit(8, strategy="single_device")
    weights = torch.load(tmp_path / "weights.pt", weights_only=True)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["collective", pytest.param("hang", marks=pytest.mark.extended)])
def test_a_failing_rank_stops_every_process_and_is_reported(tmp_path: Path, mode: str) -> None:
    script = [str(SCRIPTS / "fail_job.py"), str(tmp_path), mode]
    if mode == "hang":  # rank 0 ignores SIGTERM and sleeps: only `ember run`'s SIGKILL can end it
        argv = [sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", "--kill-timeout",
                str(KILL_TIMEOUT), *script]
    else:  # rank 0 waits in the gradient all-reduce for a peer that is gone; ember launched the processes itself
        argv = [sys.executable, *script]
    job = Job(argv, cwd=tmp_path, env=clean_env())
    code, out = job.wait(timeout=120, cleanup=False)
    ended = time.time()
    try:
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
        assert not [pid for pid in pids if alive(pid)], f"processes left behind:\n{out}"
    finally:
        job.kill_group()
    assert code == 1, out
    assert ended - float((tmp_path / "raised").read_text()) < KILL_TIMEOUT + 0.1 + SLACK
    assert "rank 1 (local rank 1" in out and "failed: ValueError: rank 1 fails at step 3" in out, out
    assert 'raise ValueError("rank 1 fails at step 3")' in out  # rank 1's own traceback, shown by the launcher
    if mode == "collective":
        assert "WorkerFailedError" in out
        # rank 0's own error (the peer closed the connection) is listed when it was recorded before the agent's
        # SIGTERM reached rank 0: torch 2.4's agent stops the others at once, later ones collect it first.
        if "Also failed" in out:
            assert "rank 0: RuntimeError" in out and "(after another rank failed)" in out
    else:
        assert out.count("ember run: rank 1") == 1


@pytest.mark.slow
def test_ctrl_c_stops_every_process_with_the_signals_exit_status(tmp_path: Path) -> None:
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "sleep_job.py"),
               str(tmp_path)], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and job.proc.poll() is None, job.wait(1)[1]
        time.sleep(0.1)
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    os.killpg(job.proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    code, out = job.wait(timeout=30, cleanup=False)
    try:
        assert not [pid for pid in pids if alive(pid)], out
    finally:
        job.kill_group()
    assert code == 128 + signal.SIGINT, out
