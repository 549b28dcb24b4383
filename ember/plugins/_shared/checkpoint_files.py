"""Checkpoint files written with ``torch.save`` and read with ``torch.load``: atomic writes and safe reads,
shared by the ``checkpoint_io.torch`` storage and the sharded checkpoints of the strategies.

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
import errno
import functools
import logging
import os
import pickle
import secrets
import shutil
import socket
import warnings
import zipfile
from collections.abc import Callable
from typing import Any

import torch

from ember.core.errors import CheckpointError, MissingCheckpointError
from ember.plugins._shared import torch_save
from ember.plugins._shared.integrity import offer_sibling, verify_zip

log = logging.getLogger("ember")


class UnsafeLoadWarning(UserWarning):
    """A checkpoint was loaded with ``weights_only=False``: code in it could run."""

_ZIP_MAGIC = b"PK\x03\x04"
# torch's legacy (pre-1.6) format starts with a pickled magic number: protocol 2, LONG1 of 10 bytes.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a"


def _tmp_prefix(path: str) -> str:
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.")


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows, where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems do not support it
        pass
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname().replace(".", "_") or "host"


#: Directories this process has already cleared of dead processes' temporary files (see below).
_CLEARED: set[str] = set()


def _remove_stale_temporaries(path: str) -> None:
    """Remove the temporary files that processes of this host which no longer run left in ``path``'s directory
    (a write they never finished), once per directory and process: the first write of a process into a
    directory clears it, and later writes skip the listing (a checkpoint every epoch would list the directory
    every epoch, on the writer thread)."""
    if os.name != "posix":  # os.kill(pid, 0) probes a process on POSIX only
        return
    directory = os.path.dirname(path)
    if directory in _CLEARED:
        return
    try:
        names = os.listdir(directory)
    except OSError:
        return
    _CLEARED.add(directory)
    for name in names:  # .<destination>.<host>-<pid>-<token>.tmp
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        parts = name[1:-len(".tmp")].rsplit(".", 1)[-1].rsplit("-", 2)
        if len(parts) != 3 or parts[0] != _host() or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
        except OSError:  # alive under another user, or unknowable: leave it
            continue


def atomic_save(obj: Any, path: str) -> None:
    """``torch.save(obj)`` to ``path`` atomically: ``path`` holds the old bytes or all of the new ones."""
    _atomic_write(path, lambda f: torch_save.save(obj, f), obj)


def serialize(obj: Any) -> memoryview:
    """The bytes ``torch.save(obj)`` writes, in memory (they belong to that moment: ``obj`` may change after)."""
    return torch_save.to_bytes(obj)


def atomic_write_bytes(data: bytes | memoryview, path: str) -> None:
    """Write ``data`` (e.g. from :func:`serialize`) to ``path`` atomically, as :func:`atomic_save` does. The bytes go
    out unbuffered: they are all there, and a buffer would only copy them (and cost a 4 MiB allocation per save)."""
    _atomic_write(path, lambda f: _write_all(f, data), len(data), buffering=0)


def _write_all(f: Any, data: bytes | memoryview) -> None:
    """All of ``data`` through an unbuffered file, which may take part of it per call."""
    view = memoryview(data)
    while view:
        view = view[f.write(view):]


def atomic_link(source: str, path: str) -> None:
    """Make ``path`` hold the bytes of the complete file ``source`` atomically, without serialising again: a hard
    link where the file system allows one, else a copy of the bytes (fsynced), renamed over ``path``."""
    source, path = os.path.abspath(source), os.path.abspath(path)
    if source == path:
        return
    _check_replaceable(path)
    _remove_stale_temporaries(path)
    tmp = _tmp_name(path)
    try:
        try:
            os.link(source, tmp)
        except FileNotFoundError:  # the destination's directory does not exist yet
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.link(source, tmp)
    except OSError:  # another device, or a file system without hard links
        _atomic_write(path, lambda f: _copy_bytes(source, f), os.path.getsize(source))
        return
    try:
        _replace(tmp, path)
        if os.path.lexists(tmp):  # path was already a link to source: rename does nothing and keeps both names
            os.remove(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(os.path.dirname(path))


def is_sharded_directory(path: str | os.PathLike) -> bool:
    """True when ``path`` is a sharded checkpoint (a directory with torch.distributed.checkpoint's ``.metadata``)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, ".metadata"))


def _check_replaceable(path: str) -> None:
    """A file write may replace a file, or a sharded checkpoint directory (e.g. the ``last.ckpt`` an earlier
    sharded run left in the same folder); any other directory at ``path`` is refused, before any work."""
    if os.path.isdir(path) and not is_sharded_directory(path):
        raise CheckpointError(f"cannot write the checkpoint file {path}: a directory of that name is in the way, and "
                              "it is not a checkpoint (no .metadata file in it). Move or remove it, or write "
                              "checkpoints elsewhere (ModelCheckpoint(dirpath=...) or Trainer(default_root_dir=...)).")


def _replace(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)``; a sharded checkpoint directory at ``path`` is replaced too: moved aside under a
    hidden name, the file renamed into place, then the directory deleted. The new file is complete before the old
    directory goes; a crash between the two renames leaves the directory under its hidden name."""
    try:
        os.replace(tmp, path)
        return
    except OSError:
        if not os.path.isdir(path):
            raise
    _check_replaceable(path)
    aside = f"{_tmp_prefix(path)}{_host()}-{os.getpid()}-{secrets.token_hex(4)}.replaced"
    os.replace(path, aside)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(aside, path)
        raise
    log.info("replaced the sharded checkpoint directory %s with a single-file checkpoint", path)
    shutil.rmtree(aside, ignore_errors=True)


def _copy_bytes(source: str, f: Any) -> None:
    with open(source, "rb") as src:
        shutil.copyfileobj(src, f, 1 << 20)


def _tmp_name(path: str) -> str:
    return f"{_tmp_prefix(path)}{_host()}-{os.getpid()}-{secrets.token_hex(4)}.tmp"


#: Bytes buffered per write to a checkpoint file.
_WRITE_BUFFER = 4 << 20


def _atomic_write(path: str, write: Callable[[Any], None], content: Any, buffering: int = _WRITE_BUFFER) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, fsync it, rename it over ``path``, fsync the
    directory; on any failure the temporary file is removed and ``path`` is untouched. ``content`` (what is
    written, or its size in bytes) sizes the error of a full disk. A folder deleted while the file was written
    (its temporary file gone with it) is created again and the file written again, once. ``buffering``: the
    file's buffer size (0 for none)."""
    path = os.path.abspath(path)
    try:
        _write_once(path, write, content, buffering)
    except FileNotFoundError:
        if os.path.isdir(os.path.dirname(path)):
            raise
        log.warning("the folder %s was deleted while %s was written into it: creating it again and writing the "
                    "file again", os.path.dirname(path), os.path.basename(path))
        _write_once(path, write, content, buffering)


def _write_once(path: str, write: Callable[[Any], None], content: Any, buffering: int) -> None:
    directory = os.path.dirname(path)
    _check_replaceable(path)
    tmp = _tmp_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileNotFoundError:  # the first file of a new directory
        os.makedirs(directory, exist_ok=True)
        fd = os.open(tmp, flags, 0o666)
    try:
        _remove_stale_temporaries(path)  # our own temporary file is left alone (its process runs)
        # A large buffer: torch.save writes a record at a time, and each system call lets the training thread
        # and this one trade the interpreter lock; a small checkpoint goes out in one write.
        with os.fdopen(fd, "wb", buffering=buffering) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        full = _disk_full_cause(exc)
        if full is not None:
            raise disk_full_error(path, content, full) from None
        raise
    _fsync_dir(directory)


_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _disk_full_cause(exc: BaseException | None) -> OSError | None:
    """The "no space" OSError behind ``exc`` (torch's writer may raise its own error while unwinding one)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
            return exc
        failures = getattr(exc, "failures", None)  # torch.distributed.checkpoint's per-rank errors
        if isinstance(failures, dict):
            for failure in failures.values():
                found = _disk_full_cause(failure[0] if isinstance(failure, tuple) else failure)
                if found is not None:
                    return found
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def disk_full_error(path: str, obj: Any, exc: OSError) -> CheckpointError:
    """The error of a save that ran out of space: where, how much is free, about how much it needs."""
    try:
        free = shutil.disk_usage(os.path.dirname(path)).free
    except OSError:
        free = -1
    needed = obj if isinstance(obj, int) else _tensor_bytes(obj)  # an int: the size of a file being copied
    state = f"{free / 2**20:.1f} MiB free" if free >= 0 else "free space unknown"
    return CheckpointError(f"cannot write {path}: no space left on the device ({exc.strerror}; {state}, the "
                           f"checkpoint needs about {needed / 2**20:.1f} MiB). The previous file at this path, if "
                           "any, is intact. Free some space or write checkpoints elsewhere (ModelCheckpoint(dirpath="
                           "...) or Trainer(default_root_dir=...)).")


def _first_line_with(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return ""


def safe_load(path: str, weights_only: bool = True, map_location: Any = "cpu") -> Any:
    """``torch.load`` (to the CPU unless ``map_location`` says otherwise), with every failure reported as a
    CheckpointError naming ``path``."""
    if not os.path.exists(path):
        raise MissingCheckpointError(f"no checkpoint at {path}: the file does not exist.")
    if is_sharded_directory(path):
        raise CheckpointError(f"{path} is a sharded checkpoint (a directory, written by strategy='fsdp'), which this "
                              "run does not read: it does not shard. Resume from it with Trainer(strategy='fsdp'), "
                              f"or turn it into one file with `ember consolidate {path} OUTPUT.ckpt` and pass that.")
    if os.path.isdir(path):
        raise CheckpointError(f"{path} is a directory, not a checkpoint file.")
    size = os.path.getsize(path)
    if size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): its write never completed. Use an earlier checkpoint."
                              f"{offer_sibling(path)}")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == _ZIP_MAGIC:
        if not zipfile.is_zipfile(path):
            raise CheckpointError(f"{path} is truncated: it starts like a torch checkpoint (a zip archive) but its "
                                  f"end-of-archive record is missing ({size} bytes). The file was cut short, e.g. "
                                  f"copied or written incompletely; use an earlier checkpoint.{offer_sibling(path)}")
    elif head == _LEGACY_MAGIC:
        raise CheckpointError(f"{path} is in torch's legacy (pre-1.6) file format, which ember does not read: load "
                              "it with torch.load and save it again with torch.save.")
    else:
        if head[:1] == b"\x80":
            raise CheckpointError(f"{path} is a bare pickle file, not a torch checkpoint. Ember does not unpickle "
                                  "arbitrary files: unpickling can run code.")
        raise CheckpointError(f"{path} is not a checkpoint: it is not a torch zip archive (it starts with the bytes "
                              f"{head.hex(' ')}). It is damaged or another kind of file.{offer_sibling(path)}")
    verify_zip(path)
    if not weights_only:
        warn_unsafe_load(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        detail = _first_line_with(str(exc), "GLOBAL", "global")
        if weights_only and detail:
            raise CheckpointError(
                f"{path} holds Python objects other than tensors and plain containers, which a weights-only load "
                f"refuses to build ({detail}). Nothing in it was run. If you wrote this file and trust it, load it "
                "with weights_only=False "  # safe: the text of an error; nothing is loaded here
                "(e.g. trainer.fit(..., weights_only=False)).") from None  # safe: the text of an error
        raise CheckpointError(f"{path} is damaged: its data cannot be read "
                              f"({_first_line_with(str(exc), 'error', 'Unsupported') or type(exc).__name__})."
                              f"{offer_sibling(path)}") from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError, KeyError, TypeError, IndexError,
            AttributeError, MemoryError, OverflowError) as exc:
        message = str(exc).split(". ")[0][:300] or type(exc).__name__
        raise CheckpointError(f"{path} is damaged or truncated: torch cannot read it ({message})."
                              f"{offer_sibling(path)}") from None


def warn_unsafe_load(path: str) -> None:
    """The loud warning of every ``weights_only=False`` load: the file's pickled code runs."""
    unsafe = "weights_only=False"  # safe: the text of the warning of a load the caller opted into
    message = (f"loading {path} with {unsafe}: any code pickled in this file runs now, with your "
               "permissions. Do this only for files you wrote yourself; ember's own checkpoints never need it.")
    log.warning(message)
    warnings.warn(message, UnsafeLoadWarning, stacklevel=4)
