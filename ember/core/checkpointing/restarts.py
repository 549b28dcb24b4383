"""Fault-tolerant runs: a process group started again after a worker died resumes by itself.

A run is *restartable* when its launcher may start it again: ``ember run --max-restarts N`` or ``torchrun
--max-restarts N`` (torch's elastic agent sets ``TORCHELASTIC_MAX_RESTARTS`` and, in every started process,
``TORCHELASTIC_RESTART_COUNT``), or a SLURM job that was requeued (``SLURM_RESTART_COUNT``). In a restarted
process, a ``fit`` without a ``ckpt_path`` resumes from the newest checkpoint of its run that loads
(:data:`RESTART`), in the same run folder: ``ember run`` keeps a small record of each logger's version for the
job's lifetime (:func:`remembered_version`), so the restarted group writes where the first one did. How often
a restartable run saves is the ``restart_save_every_n_steps`` option (``callback.restart-saves``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from ember.core.checkpointing.checkpoint_format import check_format, read
from ember.core.checkpointing.checkpoint_paths import CheckpointPaths, announce, checkpoint_dirs
from ember.core.errors import CheckpointError

log = logging.getLogger("ember")

#: ``ckpt_path`` of a fit in a restarted process given none: the newest checkpoint of this run that loads.
RESTART = "<newest intact checkpoint of this run>"
#: A folder the launcher keeps for the whole job, across restarts (``ember run`` sets it).
STATE_DIR_ENV = "EMBER_RESTART_STATE"


def restart_count() -> int:
    """How many times this job's processes were started again (0 in the first attempt)."""
    for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 0


def restartable() -> bool:
    """Whether the launcher may start this job again after a worker dies."""
    value = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "")
    return (value.isdigit() and int(value) > 0) or restart_count() > 0


def newest_loadable(folders: Iterable[str], load: Callable[[str], Any]) -> tuple[str, Any] | None:
    """``(path, checkpoint)`` of the newest checkpoint file or sharded folder in ``folders`` that ``load``
    reads without a :class:`CheckpointError`; damaged ones are skipped with a warning naming them."""
    candidates: list[tuple[float, str]] = []
    for folder in dict.fromkeys(folders):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not (entry.name.endswith(".ckpt") or entry.is_dir()):
                continue
            try:
                candidates.append((entry.stat().st_mtime, entry.path))
            except OSError:
                continue
    for _, path in sorted(candidates, reverse=True):
        try:
            return path, load(path)
        except CheckpointError as exc:
            log.warning("restart: skipping %s, which cannot be resumed from: %s", path, exc)
    return None


def resume_point(trainer: Any, last_paths: Callable[[], list[str]]) -> str | None:
    """What :data:`RESTART` means: the newest checkpoint of the run's checkpoint folders that loads (found on
    global rank 0, the same answer on every rank), or None: the restarted fit starts from the beginning.
    Without a launcher's record of the run folder (torchrun, a requeued SLURM job), this attempt may have a new
    folder: then the latest run of this run name is continued, as ``ckpt_path="last"`` does."""
    t = trainer
    found: str | None = None
    if t.is_global_zero:
        folders = [os.path.dirname(p) for p in last_paths()] + checkpoint_dirs(t)
        hit = newest_loadable(folders, lambda path: check_format(read(t.plugin_manager, t, path, True), path))
        found = hit[0] if hit is not None else None
        if found is None and not os.environ.get(STATE_DIR_ENV):
            found = CheckpointPaths(t, last_paths).latest_run("last")
        announce(t, f"restart {restart_count()} of this job: " + (
            f"resuming from {found}" if found else f"no checkpoint in {' or '.join(dict.fromkeys(folders))}; "
                                                  "starting from the beginning"))
    return t.broadcast(found) if t.world_size > 1 else found


# -- the run folder across restarts -----------------------------------------------------------------------
def _versions_file() -> str | None:
    folder = os.environ.get(STATE_DIR_ENV)
    return os.path.join(folder, "versions.json") if folder and os.path.isdir(folder) else None


def _versions() -> dict[str, Any]:
    path = _versions_file()
    if path is None or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remembered_version(root_dir: str) -> int | str | None:
    """The version a logger writing under ``root_dir`` used in an earlier attempt of this job, if any."""
    if restart_count() == 0:
        return None
    version = _versions().get(os.path.abspath(root_dir))
    return version if isinstance(version, (int, str)) else None


def remember_version(root_dir: str, version: int | str) -> None:
    """Record the version of ``root_dir`` for a later attempt of this job (only under a launcher that keeps a
    state folder; written atomically)."""
    path = _versions_file()
    if path is None:
        return
    data = _versions()
    data[os.path.abspath(root_dir)] = version
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)
