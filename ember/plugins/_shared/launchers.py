"""How a process was started, read from the variables its launcher set (torchrun, SLURM, by hand).

The cluster environments read these to answer ``distributed_info``; the DDP strategy reads them to rank itself
for ``strategy="auto"`` before any plugin is registered.
"""

from __future__ import annotations

import os

#: What torchrun / the elastic agent sets in every process it starts.
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
#: SLURM job names of interactive allocations, where the shell is not one of the job's tasks.
SLURM_INTERACTIVE = ("bash", "interactive")


def torchrun_detected() -> bool:
    """True in a process started by torchrun / the elastic agent."""
    return "TORCHELASTIC_RUN_ID" in os.environ and all(v in os.environ for v in TORCHRUN_VARS)


def slurm_detected() -> bool:
    """True in a process started as a task of a (non-interactive) SLURM job step."""
    return "SLURM_NTASKS" in os.environ and "SLURM_PROCID" in os.environ and \
        os.environ.get("SLURM_JOB_NAME") not in SLURM_INTERACTIVE


def started_by_hand() -> bool:
    """True in one of several processes started by hand (``WORLD_SIZE`` above 1)."""
    return os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1")


def launched() -> bool:
    """True when a launcher (torchrun, SLURM) or the user started this process as one of several."""
    return torchrun_detected() or slurm_detected() or started_by_hand()
