"""``environment.slurm``: one process per SLURM task (``srun python train.py``)."""

from __future__ import annotations

import os
import re
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.environments import env_int

#: Job names SLURM gives interactive allocations, where the shell (not srun) starts processes.
_INTERACTIVE = ("bash", "interactive")


def detected() -> bool:
    """True in a process started as a task of a (non-interactive) SLURM job step."""
    return "SLURM_NTASKS" in os.environ and "SLURM_PROCID" in os.environ and \
        os.environ.get("SLURM_JOB_NAME") not in _INTERACTIVE


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


class SLURMEnvironment:
    """Reads ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NTASKS`` and the node list; rank 0's
    host is the first node of the job, its port ``MASTER_PORT`` or one derived from the job id."""

    role = "environment"
    identity = "environment.slurm"

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
