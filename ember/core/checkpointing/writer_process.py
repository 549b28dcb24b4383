"""Checkpoint writes in a writer process, outside the training process's interpreter lock.

A background thread still pickles under the training process's interpreter lock: ``torch.save`` calls back into
Python for every object of a checkpoint, and the training thread waits meanwhile. With a storage that declares
``writer = "process"`` (``TorchCheckpointIO(writer="process")``), the loop's safe point instead

1. walks the checkpoint once (the plain-data check) and copies every tensor into one shared-memory buffer
   (:class:`Arena`; allocated at the first save, reused while the checkpoint's tensors fit, grown otherwise);
2. sends the writer process a small description: the checkpoint's containers, numbers and strings as they
   are, each tensor replaced by its index in the buffer (:class:`SharedTensor`), the buffer's name and layout
   (offset, dtype and shape per tensor), and the operations to carry out (save, link, remove, in order).

The writer process views each tensor's bytes in the buffer (no copy), and calls the storage's own ``save_checkpoint``,
``link_checkpoint`` and ``remove_checkpoint`` (with ``trainer=None``): serialise, write, fsync, rename. It
answers each job with nothing or with its error, which the training process raises at the next save or flush
as it does for the thread. Only data crosses the process boundary; the storage object is sent once, when the
process starts, by reference to its class.

The process is started (from a ``forkserver`` where the platform has one, so that starting it per fit costs a
fork, not an import of torch) when a fit that checkpoints begins (or else by its first save), on a helper thread
that sends it the first save's job once it runs (the training thread goes on meanwhile), and stopped and joined
when the fit ends. If it cannot start, or dies (killed, out of memory), the job it held is written in this process
from the shared buffer, the fit goes on with the writer thread, and a warning says so once. A checkpoint this path
cannot describe (a tensor subclass, a sparse or quantized tensor) is written by the thread, from a snapshot, as
before.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import torch

from ember.core.checkpointing.checkpoint_format import make_plain, walk_once
from ember.core.checkpointing.script_guard import unguarded_script_line
from ember.core.errors import CheckpointError

log = logging.getLogger("ember")

#: Offsets of the tensors in the shared buffer are multiples of this (any dtype can view its bytes).
ALIGN = 64

Layout = list[tuple[int, torch.dtype, tuple[int, ...]]]  # (offset, dtype, shape) per tensor
Op = tuple[str, str, Any]


class SharedTensor:
    """Stands for the ``index``-th tensor of the shared buffer in a checkpoint's description."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[Any, ...]:
        return SharedTensor, (self.index,)


class _Unsuitable(Exception):
    """A tensor the shared buffer cannot hold as it is; the thread writes this checkpoint."""


def describe(checkpoints: list[Any]) -> tuple[list[Any], list[torch.Tensor]]:
    """The descriptions of plain ``checkpoints`` (each tensor replaced by a :class:`SharedTensor`) and the tensors,
    in index order; the same tensor twice is one index. Raises ``_Unsuitable``."""
    tensors: list[torch.Tensor] = []
    memo: dict[int, SharedTensor] = {}

    def place(tensor: torch.Tensor) -> SharedTensor:
        shared = memo.get(id(tensor))
        if shared is None:
            if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.is_quantized or \
                    tensor.is_nested:
                raise _Unsuitable(type(tensor).__name__)
            memo[id(tensor)] = shared = SharedTensor(len(tensors))
            tensors.append(tensor)
        return shared

    return [walk_once(c, lambda c: make_plain(c, tensor=place)) for c in checkpoints], tensors


def _views(buffer: torch.Tensor, layout: Layout) -> list[torch.Tensor]:
    out = []
    for offset, dtype, shape in layout:
        nbytes = _nbytes(dtype, shape)
        out.append(buffer[offset:offset + nbytes].view(dtype).view(shape))
    return out


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    numel = 1
    for n in shape:
        numel *= n
    return numel * dtype.itemsize


class Arena:
    """The shared-memory buffer the training process copies a checkpoint's tensors into, and its views."""

    def __init__(self) -> None:
        self.memory: shared_memory.SharedMemory | None = None
        self.layout: Layout = []
        self.views: list[torch.Tensor] = []
        self._retired: list[shared_memory.SharedMemory] = []

    @property
    def name(self) -> str:
        return self.memory.name if self.memory is not None else ""

    def place(self, tensors: list[torch.Tensor]) -> None:
        """Copy ``tensors`` into the buffer (growing it when they do not fit); device tensors are copied
        synchronously (the buffer is not pinned)."""
        shapes = [(t.dtype, tuple(t.shape)) for t in tensors]
        if self.memory is None or shapes != [(dtype, shape) for _, dtype, shape in self.layout]:
            self._lay_out(shapes)
        with torch.no_grad():
            for view, tensor in zip(self.views, tensors, strict=True):
                view.copy_(tensor)

    def _lay_out(self, shapes: list[tuple[torch.dtype, tuple[int, ...]]]) -> None:
        layout: Layout = []
        end = 0
        for dtype, shape in shapes:
            layout.append((end, dtype, shape))
            end += -(-_nbytes(dtype, shape) // ALIGN) * ALIGN
        if self.memory is None or self.memory.size < end:
            self._retire()
            self.memory = shared_memory.SharedMemory(create=True, size=max(ALIGN, end + end // 4))
        buffer = torch.frombuffer(self.memory.buf, dtype=torch.uint8)
        try:
            self.views = _views(buffer, layout)
        except RuntimeError as exc:  # a dtype that cannot view bytes
            self.layout, self.views = [], []
            raise _Unsuitable(str(exc)) from None
        self.layout = layout

    def _retire(self) -> None:
        """The current buffer is replaced: removed now, unmapped once nothing views it."""
        self.views, self.layout = [], []
        if self.memory is not None:
            self.memory.unlink()
            self._retired.append(self.memory)
            self.memory = None
        kept = []
        for memory in self._retired:
            try:
                memory.close()
            except BufferError:  # still viewed (a tensor not yet collected)
                kept.append(memory)
        self._retired = kept

    def close(self) -> None:
        self._retire()


def _own_views(memory: memoryview, layout: Layout) -> list[torch.Tensor]:
    """A tensor over each region of the buffer, each with a storage of its own (its bytes only, so that the file
    gets them alone, as from a copy), none copied."""
    out = []
    for offset, dtype, shape in layout:
        numel = _nbytes(dtype, shape) // dtype.itemsize
        out.append(torch.frombuffer(memory, dtype=dtype, count=numel, offset=offset).view(shape) if numel
                   else torch.empty(shape, dtype=dtype))
    return out


def rebuild(descriptions: list[Any], layout: Layout, memory: memoryview | None) -> list[Any]:
    """The checkpoints the descriptions stand for, each tensor viewing its bytes in the shared buffer ``memory``
    (not copied: the buffer is not written again until the job is answered)."""
    assert memory is not None  # SharedMemory.buf, None only once closed
    tensors = _own_views(memory, layout)

    def walk(obj: Any) -> Any:
        kind = type(obj)
        if kind is SharedTensor:
            return tensors[obj.index]
        if kind is dict or kind is OrderedDict:
            out = kind([(k, walk(v)) for k, v in obj.items()])
            if kind is OrderedDict:
                out.__dict__.update(vars(obj))  # a state_dict's _metadata
            return out
        if kind is list or kind is tuple:
            return kind([walk(v) for v in obj])
        return obj

    return [walk_once(d, walk) for d in descriptions]


def carry_out(storage: Any, ops: list[Op], checkpoints: list[Any], at: Callable[[str], None]) -> None:
    """The storage work of one safe point, in order; ``ops`` name checkpoints by index. A checkpoint already
    written goes to its next file as a link when the storage can make one."""
    written: dict[int, str] = {}
    for op, path, index in ops:
        at(path)
        if op == "remove":
            storage.remove_checkpoint(trainer=None, path=path)
            continue
        source = written.get(index)
        if source is not None and storage.link_checkpoint(None, source, path):
            continue
        storage.save_checkpoint(trainer=None, checkpoint=checkpoints[index], path=path)
        written[index] = path


def _serve(conn: multiprocessing.connection.Connection, storage: Any, setup: Callable[[], None] | None) -> None:
    """The writer process: one job at a time, until told to stop or the training process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the fit, which then stops this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    if setup is not None:
        setup()
    memory: shared_memory.SharedMemory | None = None
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the training process is gone: the file written last is complete
            return
        if job is None:
            return
        name, layout, descriptions, ops = job
        path: list[str] = []
        try:
            if memory is None or memory.name != name:
                if memory is not None:
                    with contextlib.suppress(BufferError):
                        memory.close()
                memory = shared_memory.SharedMemory(name=name)
            checkpoints = rebuild(descriptions, layout, memory.buf)
            carry_out(storage, ops, checkpoints, path.append)
            del checkpoints
            conn.send(None)
        except BaseException as exc:  # reported to the training process
            conn.send((path[-1] if path else "", type(exc).__name__, str(exc), isinstance(exc, CheckpointError)))


def _context(preload: list[str]) -> Any:
    """A forkserver (a fork per start, torch and ``preload`` imported once) where there is one; else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", __name__, *preload])  # no effect once the forkserver runs
    return ctx


#: Called in the writer process before it serves (tests use it to slow a write down); a module-level function.
child_setup: Callable[[], None] | None = None


class WriterProcess:
    """One fit's writer process (see the module docstring): at most one job in flight."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.arena = Arena()
        self.failed = False
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._pending: tuple[list[Any], list[Op]] | None = None
        self._starter: threading.Thread | None = None
        self._start_error: BaseException | None = None
        #: Set once the process runs and may be sent jobs directly; until then the helper thread that starts it
        #: sends the job waiting in ``_first`` (both under ``_handover``).
        self._ready = False
        self._first: Any = None
        self._handover = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._pending is not None

    @property
    def alive(self) -> bool:
        return self._starter is not None or (self._process is not None and self._process.is_alive())

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start_soon(self) -> None:
        """Start the process now, on a helper thread, before any job: at the start of a fit, so that it runs by the
        first save (a start takes a fork, 5-15 ms, and the first job's first-time work; the fit's second save would
        otherwise wait for them). Called on the training thread, which the script check reads."""
        if self._starter is None and self._process is None and not self.failed:
            self._starter = threading.Thread(target=self._start_and_send, args=(unguarded_script_line(),),
                                             name="ember-checkpoint-writer-start", daemon=True)
            self._starter.start()

    def submit(self, ops: list[Op]) -> bool:
        """Wait for the job in flight, then hand the writer process ``ops`` (checkpoints as plain dicts); False
        (nothing sent) when a tensor cannot go through the shared buffer or the process has failed. Unless
        :meth:`start_soon` started it, the fit's first job starts the process on a helper thread; while that
        thread starts it, it takes the job and sends it once the process runs: the training thread does not wait
        for the start (a fork, or in a fresh interpreter the forkserver's import of torch)."""
        self.wait()
        if self.failed:
            return False
        index: dict[int, int] = {}
        checkpoints: list[Any] = []
        for _, _, checkpoint in ops:
            if checkpoint is not None and id(checkpoint) not in index:
                index[id(checkpoint)] = len(checkpoints)
                checkpoints.append(checkpoint)
        try:
            descriptions, tensors = describe(checkpoints)
            self.arena.place(tensors)
        except _Unsuitable:
            return False
        jobs = [(op, path, None if c is None else index[id(c)]) for op, path, c in ops]
        self._pending = (descriptions, jobs)
        message = (self.arena.name, self.arena.layout, descriptions, jobs)
        self.start_soon()
        with self._handover:
            if not self._ready:  # the helper thread is starting the process (or could not): it takes the job
                self._first = message
                return True
        try:
            assert self._conn is not None
            self._conn.send(message)
        except OSError:  # already dead: written by wait()
            pass
        return True

    def _start_and_send(self, unguarded: int | None = None) -> None:
        """On the helper thread: start the process, then send it the job submitted meanwhile, if any (the training
        thread joins this thread before it reads an answer). ``unguarded``: the script's line that runs the fit
        outside ``if __name__ == "__main__":`` (no process is started then)."""
        try:
            if unguarded is not None:
                raise CheckpointError(
                    f"line {unguarded} of {sys.modules['__main__'].__file__} runs the fit outside an `if __name__ == "
                    "\"__main__\":` block, and a new process imports the script again (as multiprocessing does), "
                    "which would train a second time inside the writer process. Put the script's training under "
                    "`if __name__ == \"__main__\":` to write checkpoints in a writer process")
            self._start()
        except BaseException as exc:  # e.g. a script without `if __name__ == "__main__":` under spawn, no fork
            self._start_error = exc
            return
        with self._handover:
            self._ready = True
            message, self._first = self._first, None
        if message is None:
            return
        try:
            assert self._conn is not None
            self._conn.send(message)
        except OSError:  # started, then already dead: written by wait()
            pass

    def _start(self) -> None:
        ctx = _context([type(self.storage).__module__])  # the storage's module: imported once, not per fit
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, self.storage, child_setup), name="ember-checkpoint-writer",
                              daemon=True)
        try:
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # so that the process's death reads as the end of the pipe
        self._process, self._conn = process, parent

    def wait(self) -> None:
        """Block until the job in flight is done; raise a CheckpointError naming the file if it failed."""
        if self._pending is None:
            return
        pending = self._pending
        starter, self._starter = self._starter, None
        if starter is not None:
            starter.join()
            error, self._start_error = self._start_error, None
            if error is not None:
                self._pending = self._first = None  # (the job the helper thread never sent)
                self.failed = True
                log.warning("the checkpoint writer process could not start (%s: %s); writing its checkpoint in the "
                            "training process, and the rest of this fit's checkpoints on a writer thread",
                            type(error).__name__, error)
                self._write_here(pending)
                return
        try:
            assert self._conn is not None
            answer = self._conn.recv()
        except (EOFError, OSError):
            self._pending = None
            self._died(pending)
            return
        self._pending = None
        if answer is not None:
            path, kind, message, own = answer
            if own:
                raise CheckpointError(message)
            raise CheckpointError(f"writing {path or 'a checkpoint'} in the writer process failed: {kind}: "
                                  f"{message}. The previous file at that path, if any, is intact; fix the cause "
                                  "(disk space, permissions) or save synchronously with "
                                  "Trainer(checkpoint_io=TorchCheckpointIO(async_save=False)).")

    def _died(self, pending: tuple[list[Any], list[Op]]) -> None:
        """The process ended without answering: write its job here, and use the writer thread from now on."""
        self.failed = True
        code = self._process.exitcode if self._process is not None else None
        if self._process is not None:
            self._process.join(timeout=5)
            code = self._process.exitcode
        log.warning("the checkpoint writer process ended (exit code %s); writing its checkpoint in the training "
                    "process, and the rest of this fit's checkpoints on a writer thread", code)
        self._write_here(pending)

    def _write_here(self, pending: tuple[list[Any], list[Op]]) -> None:
        """Write a job the process did not answer, in this process, from the shared buffer (untouched since)."""
        descriptions, jobs = pending
        assert self.arena.memory is not None
        carry_out(self.storage, jobs, rebuild(descriptions, self.arena.layout, self.arena.memory.buf),
                  lambda path: None)

    def close(self) -> None:
        """Finish the job in flight (logging a failure), stop the process and join it, free the buffer."""
        try:
            self.wait()
        except CheckpointError as exc:
            log.error("%s", exc)
        starter, self._starter = self._starter, None
        if starter is not None:  # started early, no job came: the start completes, then the process stops
            starter.join()
            self._start_error = None
        if self._conn is not None:
            with contextlib.suppress(OSError):  # already gone
                self._conn.send(None)
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join()
            self._process = None
        self.arena.close()
