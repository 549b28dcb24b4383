"""Checkpoint writes off the training thread.

At a safe point the loop builds the checkpoint and :func:`snapshot` copies every tensor in it to host memory
(pinned when the tensor lives on an accelerator, so the copy is asynchronous and ends with one stream
synchronisation). From then on the loop may change its weights freely: the snapshot belongs to one moment.
A :class:`BackgroundWriter` then runs the storage work (serialise, write, fsync, atomic rename, removals of
older files) on a background thread while training goes on.

Guarantees:

* at most one write is in flight: the next save waits for the previous one first, so files appear in the
  order they were requested and host memory holds at most one snapshot being written;
* every pending write is finished (:meth:`BackgroundWriter.wait`) at the end of a fit, when a fit stops on an
  exception or a signal, before any checkpoint is read (:func:`flush_all`), and at interpreter exit (an
  ``atexit`` handler waits for it and logs a failure nobody collected);
* the writer thread (or process) lives for one fit: started by its first background save, stopped and joined
  when the fit ends (:meth:`BackgroundWriter.close`), however it ends;
* a failure in the background is raised on the training thread at the next save or flush, as a
  :class:`ember.CheckpointError` naming the file;
* the storage's own atomicity is untouched: a process killed during a background write leaves the previous
  file in place (``checkpoint_io.torch`` writes a temporary file and renames it).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from ember.core.errors import CheckpointError

log = logging.getLogger("ember")

_WRITERS: weakref.WeakSet[BackgroundWriter] = weakref.WeakSet()


class SnapshotBuffers:
    """Host buffers reused from one snapshot to the next (pinned ones are slow to allocate). A buffer is found
    by the tensor's place in the checkpoint (its position in the walk): checkpoints of one fit have the same
    structure, so the same tensor gets the same buffer; a shape or dtype that differs gets a new one."""

    def __init__(self) -> None:
        self._buffers: dict[Any, torch.Tensor] = {}
        #: The bytes of the fit's last checkpoint serialised at its safe point (None: none, or it was not)
        self.inline_bytes: int | None = None

    def host_copy(self, key: Any, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of ``tensor``; asynchronous (pinned) when ``tensor`` is on an accelerator. Call it with
        gradients off (:func:`snapshot` does), so that the copy records nothing for autograd."""
        on_device = tensor.device.type != "cpu"
        if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.is_quantized or \
                tensor.is_nested or not tensor.is_contiguous():
            # rare in checkpoints: a plain copy (e.g. an expanded view), or one that keeps the tensor's type (a
            # DTensor copies its local shard and keeps its placement)
            return tensor.to("cpu", copy=True)
        buf = self._buffers.get(key)
        if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype or (on_device and not buf.is_pinned()):
            buf = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu",
                              pin_memory=on_device and torch.cuda.is_available())
            self._buffers[key] = buf
        buf.copy_(tensor, non_blocking=on_device)
        return buf

    def clear(self) -> None:
        self._buffers.clear()
        self.inline_bytes = None


def snapshot(obj: Any, buffers: SnapshotBuffers, walk: Callable[[Any, Callable[[torch.Tensor], Any]], Any] | None = None
             ) -> Any:
    """A copy of the plain checkpoint ``obj`` that shares no tensor or container with it. Device-to-host copies
    are issued asynchronously and awaited once at the end. ``walk(obj, tensor)``: a walk that copies every
    container and replaces each tensor with ``tensor(it)`` (a check of the content can copy in the same pass);
    by default, a plain copy of dicts, lists and tuples."""
    copier = _Snapshot(buffers)
    with torch.no_grad():
        copy = (walk or copier.copy_containers)(obj, copier.tensor)
    for device in copier.synced:
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        elif device.type != "cpu":
            getattr(torch, device.type).synchronize()
    return copy


class _Snapshot:
    """One snapshot's copies: the same tensor twice stays one tensor (``memo``); ``synced``: the devices copied
    from, to wait for; a tensor's buffer is found by its position in the walk."""

    __slots__ = ("buffers", "memo", "synced", "position")

    def __init__(self, buffers: SnapshotBuffers) -> None:
        self.buffers = buffers
        self.memo: dict[int, torch.Tensor] = {}
        self.synced: set[torch.device] = set()
        self.position = 0

    def tensor(self, obj: torch.Tensor) -> torch.Tensor:
        copied = self.memo.get(id(obj))
        if copied is not None:
            return copied
        if obj.device.type != "cpu":
            self.synced.add(obj.device)
        self.memo[id(obj)] = copied = self.buffers.host_copy(self.position, obj)
        self.position += 1
        return copied

    def copy_containers(self, obj: Any, tensor: Callable[[torch.Tensor], Any]) -> Any:
        kind = type(obj)
        if kind in (dict, OrderedDict):
            out = kind([(k, self.copy_containers(v, tensor)) for k, v in obj.items()])
            if kind is OrderedDict:
                out.__dict__.update(vars(obj))  # a state_dict's _metadata
            return out
        if kind in (list, tuple):
            return kind([self.copy_containers(v, tensor) for v in obj])
        if isinstance(obj, torch.Tensor):
            return tensor(obj)
        return obj  # scalars, strings, dtypes, devices, sizes, sets of scalars: immutable


class BackgroundWriter:
    """Runs one write job at a time on a background thread; see the module docstring.

    The thread is started by the first job of a fit and serves every later one (starting a thread per save costs
    milliseconds on a loaded machine); :meth:`close`, at the end of the fit, finishes the pending job and joins
    it, so no writer thread outlives its fit. It is a daemon thread: the ``atexit`` handler of this module waits
    for its job, so a write in flight at exit still completes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[Callable[[str], None]], None] | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_path = ""
        self._current_path = ""
        #: Writes that a writer process carries out (:mod:`ember.core.checkpointing.writer_process`), set by the
        #: first save that goes there; closed with the thread.
        self.process: Any = None
        _WRITERS.add(self)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        """Pickled idle (a Trainer pickled between fits): a fresh writer, which starts its thread when needed."""
        if self.running:
            raise TypeError("a Trainer cannot be pickled while its checkpoint writer runs (during a fit).")
        return BackgroundWriter, ()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set() or (self.process is not None and self.process.busy)

    @property
    def running(self) -> bool:
        """True while a writer thread or process is alive (between a fit's first save and its end)."""
        return self._thread is not None or (self.process is not None and self.process.alive)

    def on_writer_thread(self) -> bool:
        """True when called from a job this writer runs."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, job: Callable[[Callable[[str], None]], None]) -> None:
        """Wait for the write in flight (raising its error), then run ``job`` in the background. ``job`` gets a
        function to call with the path it starts writing, so a failure can name it."""
        self.wait()
        with self._lock:
            self._current_path = ""
            self._idle.clear()
            self._jobs.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="ember-checkpoint-writer", daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:  # close()
                return
            try:
                job(self._at)
            except BaseException as exc:  # surfaced on the training thread by wait()
                self._error, self._error_path = exc, self._current_path
            finally:
                del job
                self._idle.set()

    def _at(self, path: str) -> None:
        self._current_path = path

    def wait(self) -> None:
        """Block until the write in flight is done; raise a CheckpointError naming the file if it failed."""
        if self.process is not None:
            self.process.wait()
        self._idle.wait()
        error, self._error = self._error, None
        if error is not None:
            where = self._error_path or "a checkpoint"
            if isinstance(error, (OSError, CheckpointError)):  # read-only, permissions, full disk: the message
                error.__traceback__ = None  # says it all; the writer thread's frames would only bury it
            raise CheckpointError(f"writing {where} in the background failed: {type(error).__name__}: {error}. "
                                  "The previous file at that path, if any, is intact; fix the cause (disk space, "
                                  "permissions) or save synchronously with "
                                  "Trainer(checkpoint_io=TorchCheckpointIO(async_save=False)).") from error

    def wait_quietly(self) -> None:
        """:meth:`wait`, logging a failure instead of raising it (while another exception is on its way)."""
        try:
            self.wait()
        except CheckpointError as exc:
            log.error("%s", exc)

    def close(self) -> None:
        """End of a fit: finish the pending write (logging a failure: the caller has waited already when one
        must be raised), then stop the writer thread and process and join them."""
        self.wait_quietly()
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join()
        process, self.process = self.process, None
        if process is not None:
            process.close()


def flush_all() -> None:
    """Finish every background checkpoint write of this process (before a checkpoint is read)."""
    for writer in list(_WRITERS):
        writer.wait()


@atexit.register
def _flush_at_exit() -> None:
    for writer in list(_WRITERS):
        writer.wait_quietly()
