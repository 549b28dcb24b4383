"""``checkpoint_io.torch``: checkpoints as local files written with ``torch.save``, read with ``torch.load``.

Writes are atomic: the bytes go to a hidden temporary file next to the destination, are flushed and
fsynced, the file is renamed over the destination (``os.replace``, atomic on POSIX and Windows), and the
directory is fsynced so the rename itself survives a power loss. A crash at any moment leaves either the old
file or the new one at the destination, never a mix; a temporary file left by a killed process is removed by
the first save of a later process into the same directory.

Reads accept torch's zip format only, verify every record's CRC-32 first (:mod:`.integrity`), use
``torch.load(weights_only=True)`` unless the caller opts out (with a loud :class:`UnsafeLoadWarning`), and turn
every way a file can be wrong (missing, empty, truncated, random bytes, a bare pickle, torch's legacy
format, unsafe objects, damaged data) into a
:class:`ember.CheckpointError` that names the file and the problem. No code in the file runs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins._shared.checkpoint_files import (
    UnsafeLoadWarning,
    atomic_link,
    atomic_save,
    atomic_write_bytes,
    disk_full_error,
    safe_load,
    serialize,
    warn_unsafe_load,
)

__all__ = ["TorchCheckpointIO", "UnsafeLoadWarning", "atomic_link", "atomic_save", "disk_full_error", "safe_load",
           "warn_unsafe_load"]


class TorchCheckpointIO:
    """Local checkpoint files (the default checkpoint storage).

    :param async_save: while a fit trains, write checkpoints on a background thread from a snapshot taken at the
        loop's safe point (see docs/checkpoints.md). ``False`` writes them on the training thread, as
        ``trainer.save_checkpoint`` outside a fit always does. The option lives here, on the storage, because
        the storage decides whether its writes may run on another thread.
    :param writer: where background writes run: ``"thread"`` (a writer thread of the training process) or
        ``"process"`` (a writer process: the checkpoint's tensors go through shared memory, and serialising
        happens outside the training process's interpreter lock; see docs/performance.md).
    """

    WRITERS = ("thread", "process")

    role = "checkpoint_io"
    identity = "checkpoint_io.torch"

    def __init__(self, async_save: bool = True, writer: str = "thread") -> None:
        if not isinstance(async_save, bool):
            raise TypeError(f"TorchCheckpointIO(async_save={async_save!r}): pass True or False.")
        if writer not in self.WRITERS:
            raise ValueError(f"TorchCheckpointIO(writer={writer!r}): choose one of {', '.join(map(repr, self.WRITERS))}.")
        self.async_save = async_save
        self.writer = writer

    @staticmethod
    def auto_select(config: Any) -> int:
        return 0

    @hookimpl
    def save_checkpoint(self, trainer: Any, checkpoint: dict | memoryview, path: str) -> bool:
        if trainer is None or trainer.global_rank == 0:  # one file for all processes
            if isinstance(checkpoint, memoryview):  # what serialize_checkpoint returned
                atomic_write_bytes(checkpoint, path)
            else:
                atomic_save(checkpoint, path)
        return True

    def serialize_checkpoint(self, checkpoint: dict) -> memoryview | None:
        """The bytes :meth:`save_checkpoint` would write for ``checkpoint``, taken now; ``save_checkpoint`` called
        later (on the writer thread) with them writes them. None when a subclass changes how files are written."""
        return serialize(checkpoint) if self._writes_plain_files() else None

    def link_checkpoint(self, trainer: Any, source: str, path: str) -> bool:
        """Give ``path`` the bytes already written to ``source`` (a hard link, or a copy of the bytes). False
        (write it with ``save_checkpoint``) when a subclass changes how files are written, or ``source`` is gone."""
        if not self._writes_plain_files():
            return False
        if trainer is None or trainer.global_rank == 0:
            if not os.path.isfile(source):
                return False
            atomic_link(source, path)
        return True

    def _writes_plain_files(self) -> bool:
        """False for a subclass that changes how files are written (its save_checkpoint must see every save)."""
        return type(self).save_checkpoint is TorchCheckpointIO.save_checkpoint

    @hookimpl
    def load_checkpoint(self, path: str, weights_only: bool) -> Any:
        return safe_load(downloaded(path) if path.startswith(("http://", "https://")) else path, weights_only)

    @hookimpl
    def remove_checkpoint(self, trainer: Any, path: str) -> bool:
        if trainer is None or trainer.global_rank == 0:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return True


def downloaded(url: str) -> str:
    """A checkpoint given by URL (``load_from_checkpoint("https://...")``), as a local file: downloaded once into
    torch hub's cache (``$TORCH_HOME/hub/checkpoints``) under its file name, as ``torch.hub`` keeps weights. It is
    read like any checkpoint file (``weights_only``, checked)."""
    import urllib.parse

    import torch.hub

    name = os.path.basename(urllib.parse.urlparse(url).path) or "checkpoint.ckpt"
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        torch.hub.download_url_to_file(url, path, progress=False)
    return path
