"""Two nodes simulated on one machine: two launchers, each starting 2 gloo processes, meet at a c10d rendezvous on
localhost (``--nnodes 2``), through torchrun and through ember's own launcher (``ember run``). The four processes
train the same weights as one process on the global batch; a node whose launcher dies takes the other node's
processes down within the configured bound. The environment variables torchrun really sets are recorded in the
job and read back here."""

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
from dist_support import SCRIPTS, Job, alive, free_port, load_script

import ember
from ember.plugins.environments import torchrun

#: ``ember run --kill-timeout``: seconds between SIGTERM and SIGKILL when the agent stops its processes.
KILL_TIMEOUT = 2
#: The agent's monitor interval (ember's launcher default) plus slack for interpreters to exit on a busy
#: two-core machine shared with other jobs.
SLACK = 20

LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run"],
    "ember run": [sys.executable, "-m", "ember.cli", "run"],
}


def node_argv(launcher: str, port: int, run_id: str, script: list[str]) -> list[str]:
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    if launcher == "torchrun":
        rdzv += ["--rdzv-id", run_id, "--max-restarts", "0"]
    else:
        rdzv += ["--run-id", run_id, "--kill-timeout", str(KILL_TIMEOUT)]
    return [*LAUNCHERS[launcher], "--nnodes", "2", "--nproc-per-node", "2", *rdzv, *script]


def start_two_nodes(launcher: str, tmp_path: Path, script: list[str]) -> list[Job]:
    port, run_id = free_port(), uuid.uuid4().hex[:8]
    return [Job(node_argv(launcher, port, run_id, script), cwd=tmp_path) for _ in range(2)]


@pytest.mark.slow
@pytest.mark.extended  # two nodes are in every run under torchrun on loopback (tests/test_launch.py)
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_two_nodes_of_two_processes_train_the_weights_of_one_process(tmp_path: Path, launcher: str) -> None:
    jobs = start_two_nodes(launcher, tmp_path, [str(SCRIPTS / "nodes_job.py"), str(tmp_path)])
    for job in jobs:
        code, out = job.wait(timeout=150)
        assert code == 0, out
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["global_rank"] for r in ranks] == [0, 1, 2, 3]
    assert sorted((r["node_rank"], r["local_rank"]) for r in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in ranks:
        assert r["world_size"] == 4
        assert r["roles"]["environment"] == "environment.torchrun"
        assert r["roles"]["strategy"] == "strategy.ddp"  # picked by "auto": nothing in the job names it
    # 4 processes x batch 4, each on its own quarter of the data = one process with batch 16
    model, _ = load_script("nodes_job.py").fit(16, strategy="single_device")
    weights = torch.load(tmp_path / "weights.pt", weights_only=True)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=1e-5, atol=1e-6)
    # what torchrun really set in a process of node 1, read back by ember's environment plugin here
    env = next(r["env"] for r in ranks if r["global_rank"] == 3)
    assert {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_RUN_ID"} <= env.keys()
    recorded = next(r for r in ranks if r["global_rank"] == 3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "excepthook", sys.excepthook)  # the torchrun environment chains its own hook
        for name, value in env.items():
            mp.setenv(name, value)
        assert torchrun.detected()
        info = torchrun.TorchrunEnvironment().distributed_info()
        assert info["global_rank"] == 3 and info["world_size"] == 4 and info["local_world_size"] == 2
        assert (info["node_rank"], info["local_rank"]) == (recorded["node_rank"], recorded["local_rank"])
        assert info["num_nodes"] == 2 and info["launched"] is True
        trainer = ember.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
        assert trainer.role_identities["environment"] == "environment.torchrun"
        assert trainer.role_identities["strategy"] == "strategy.ddp"


def _pids(out: Path, job: list[Job], n: int, timeout: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout
    while not all((out / f"pid{r}").exists() for r in range(n)):
        if any(j.proc.poll() is not None for j in job) or time.monotonic() > deadline:
            for j in job:
                j.kill_group()
            pytest.fail("the job never started training:\n" + "\n".join(j.wait(5)[1] for j in job))
        time.sleep(0.05)
    return [int((out / f"pid{r}").read_text()) for r in range(n)]


@pytest.mark.slow
@pytest.mark.extended  # a dead launcher ends its own workers in every run: tests/test_reliability_orphans.py
def test_a_node_whose_launcher_dies_stops_the_other_node(tmp_path: Path) -> None:
    """SIGKILL to one node's `ember run` (the launcher alone, as the OOM killer would): its processes die with it,
    the other node's processes fail in their next collective, and their launcher stops them and exits."""
    jobs = start_two_nodes("ember run", tmp_path, [str(SCRIPTS / "slow_ddp_job.py"), str(tmp_path)])
    pids = _pids(tmp_path, jobs, 4)
    victim, survivor = jobs
    try:
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        code, out = survivor.wait(timeout=120, cleanup=False)
        seconds = time.monotonic() - killed
        while any(alive(pid) for pid in pids) and time.monotonic() - killed < 120:
            time.sleep(0.05)
        gone = time.monotonic() - killed
        print(f"other node's launcher exited {seconds:.1f} s, every process gone {gone:.1f} s after the SIGKILL")
        assert not [pid for pid in pids if alive(pid)], f"processes left behind:\n{out}"
        assert code != 0, out
        assert gone < KILL_TIMEOUT + SLACK, out
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        for job in jobs:
            job.kill_group()
            if job.proc.stdout is not None and not job.proc.stdout.closed:
                job.proc.communicate(timeout=30)
