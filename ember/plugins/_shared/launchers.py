"""How a process was started, read from the variables its launcher set (torchrun, SLURM, by hand), and the
error record the elastic agent reads.

The cluster environments read these to answer ``distributed_info``; the DDP strategy reads them to rank itself
for ``strategy="auto"`` before any plugin is registered.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback

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


def peer_failure(exc: BaseException) -> bool:
    """True when ``exc`` most likely comes from another process having failed first: a collective or the
    rendezvous store lost its connection to a peer."""
    import torch.distributed as dist

    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                            "ProcessGroupGloo", "Socket Timeout", "NCCL communicator was aborted"))


_written: dict[str, BaseException] = {}


def write_error_file(exc: BaseException, global_rank: int) -> None:
    """Record ``exc`` in the file the elastic agent reads (``TORCHELASTIC_ERROR_FILE``), in the agent's format,
    plus ember's own fields: the rank, a precise time, whether the error looks caused by a peer, and the
    exception's ``ember_info`` dict, if it has one (the hang watchdog's names the hung processes)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or _written.get("exception") is exc:
        return
    _written["exception"] = exc
    now = time.time()
    secondary = peer_failure(exc)
    data = {"message": {
        "message": f"{type(exc).__name__}: {exc}",
        "extraInfo": {
            "py_callstack": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            # The agent names the failure with the earliest (whole-second) timestamp as the root cause; a
            # failure caused by a peer's is dated a second later so that the peer's wins a tie.
            "timestamp": str(int(now) + (1 if secondary else 0)),
            "ember": {**(getattr(exc, "ember_info", None) or {}), "rank": global_rank, "time": now,
                      "peer_failure": secondary, "exception": type(exc).__name__},
        },
    }}
    # Written whole or not at all: the agent stops the other processes as soon as one fails, and a file it finds
    # empty or cut short (this process killed between the open and the write) makes the agent itself fail.
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):  # a full disk, or ember_info that JSON cannot hold: no file, no new error
        with contextlib.suppress(OSError):
            os.remove(tmp)
