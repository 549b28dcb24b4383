"""Folders a run writes into (its run folder, its checkpoint folder): checked before training starts, so that a
folder that cannot be written is a clear error naming it, not an ``OSError`` from deep inside a save."""

from __future__ import annotations

import os

from ember.core.errors import ConfigurationError


def check_writable(path: str, what: str, fix: str) -> None:
    """Raise :class:`ConfigurationError` if ``path`` (created or not yet) cannot be written: its nearest
    existing ancestor is a file, is read-only or is not writable for this user. ``what`` names the folder
    ("the run folder"), ``fix`` says how to choose another one. Creates nothing."""
    path = os.path.abspath(path)
    existing = path
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        why = f"{existing} is a file, not a folder"
    elif not os.access(existing, os.W_OK | os.X_OK):
        read_only = bool(getattr(os, "ST_RDONLY", 0)) and bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        why = f"{existing} is on a read-only file system" if read_only else \
            f"{existing} is not writable (permission denied)"
    else:
        return
    raise ConfigurationError(f"cannot write {what} {path}: {why}. Stopped before the first step; {fix}.")
