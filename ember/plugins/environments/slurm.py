"""``environment.slurm``: one process per SLURM task (``srun python train.py``)."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins._shared.launchers import slurm_detected
from ember.plugins.environments import env_int

log = logging.getLogger("ember")

detected = slurm_detected  #: True in a task of a non-interactive SLURM job step


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list: ``"gpu[003-005,9],cpu1"`` -> ``"gpu003"``."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], first)


def main_port(job_id: str | None) -> int:
    """A port derived from the job id, the same on every node, in 15000-34999."""
    if "MASTER_PORT" in os.environ:
        return env_int("MASTER_PORT")
    digits = re.sub(r"\D", "", job_id or "") or "0"
    return 15000 + int(digits) % 20000


def _tasks_per_node() -> int | None:
    raw = os.environ.get("SLURM_NTASKS_PER_NODE") or os.environ.get("SLURM_TASKS_PER_NODE")
    m = re.match(r"\d+", raw or "")
    return int(m.group(0)) if m else None


def job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for an array task, else the job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


class SLURMEnvironment:
    """Reads ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS`` and the node list; rank 0's
    host is the first node of the job, its port ``MASTER_PORT`` or one derived from the job id.

    Requeue: with ``auto_requeue`` (the default), the signal SLURM sends before the time limit
    (``#SBATCH --signal=USR1@90``; ``requeue_signal``, SIGUSR1 by default) makes the fit write its checkpoint at
    the next safe point and stop, and global rank 0 then runs ``scontrol requeue <job id>``: the job starts
    again and resumes with ``ckpt_path="last"``.
    """

    role = "environment"
    identity = "environment.slurm"

    def __init__(self, auto_requeue: bool = True, requeue_signal: int = signal.SIGUSR1) -> None:
        self.auto_requeue = auto_requeue
        self.requeue_signal = signal.Signals(requeue_signal)
        self._previous: Any = None

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 20 if detected() else None

    @staticmethod
    def check_available(config: Any) -> None:
        if "SLURM_NTASKS" not in os.environ or "SLURM_PROCID" not in os.environ:
            raise ConfigurationError("Trainer(environment='slurm'): SLURM_NTASKS/SLURM_PROCID are unset, so this "
                                     "process is not a SLURM task. Start it with `srun`, or use environment='auto'.")

    @hookimpl
    def distributed_info(self) -> dict:
        nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "127.0.0.1"
        world = env_int("SLURM_NTASKS")
        nodes = env_int("SLURM_JOB_NUM_NODES", env_int("SLURM_NNODES", 1))
        return {
            "global_rank": env_int("SLURM_PROCID"),
            "local_rank": env_int("SLURM_LOCALID", 0),
            "node_rank": env_int("SLURM_NODEID", 0),
            "world_size": world,
            "local_world_size": _tasks_per_node() or max(1, world // max(nodes, 1)),
            "num_nodes": nodes,
            "main_address": os.environ.get("MASTER_ADDR") or first_host(nodelist),
            "main_port": main_port(os.environ.get("SLURM_JOB_ID")),
            "launched": True,
        }

    # -- requeue on SLURM's warning signal ---------------------------------------------------------------------
    @hookimpl
    def setup(self, trainer: Any, stage: str) -> None:
        if stage != "fit" or not self.auto_requeue or threading.current_thread() is not threading.main_thread():
            return
        try:
            from ember.core.loop.signals import request_stop
        except ImportError:  # an ember without checkpointed stops: leave the signal alone
            return

        def handle(signum: int, frame: Any) -> None:
            log.warning("received %s from SLURM: checkpointing, then requeueing the job", signal.Signals(signum).name)
            request_stop(trainer, signum, requeue=True)

        self._previous = signal.signal(self.requeue_signal, handle)

    @hookimpl
    def teardown(self) -> None:
        if self._previous is not None:
            signal.signal(self.requeue_signal, self._previous)
            self._previous = None

    @hookimpl
    def requeue(self, trainer: Any, signum: int, requested: bool) -> Any:
        if not self.auto_requeue or not (requested or signum == self.requeue_signal):
            return None
        if trainer.global_rank != 0:
            return True
        job = job_id()
        try:
            done = subprocess.run(["scontrol", "requeue", str(job)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("could not requeue SLURM job %s: %s", job, exc)
            return True
        if done.returncode:
            log.warning("scontrol requeue %s failed (exit code %d): %s", job, done.returncode, done.stderr.strip())
        else:
            log.warning("requeued SLURM job %s", job)
        return True
