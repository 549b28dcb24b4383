"""How the checkpoints requested at one safe point reach storage: on which thread, in which form, linked or
written.

:class:`Writes` is decided once per safe point from the plugins that answer ``save_checkpoint``:

* **where**: in the background (the trainer's :class:`~ember.core.checkpointing.async_writer.BackgroundWriter`) while a fit
  trains and every plugin answering ``save_checkpoint`` itself is the storage or declares ``async_save``;
  otherwise on the training thread. In the background, a writer process
  (:mod:`ember.core.checkpointing.writer_process`) when the storage declares ``writer = "process"`` and alone
  answers ``save_checkpoint`` and ``remove_checkpoint`` in a single-process fit, else the writer thread;
* **what the background gets**, taken on the training thread at the safe point so that training may go on:
  the stager's copy (a plugin answering ``save_checkpoint`` with ``stage_checkpoint(trainer, checkpoint)``,
  e.g. FSDP's, which copies its shards to host memory), the storage's bytes (``serialize_checkpoint``, for a
  small checkpoint of a single process on the CPU), or a snapshot (every tensor copied to host buffers);
* **links**: a second file of the same checkpoint gets the bytes already written (``link_checkpoint``) when
  the storage is what writes (not a stager: its files are its own, e.g. a sharded directory written by every
  process, which each process must write, or not, alike).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from ember.core.checkpointing import writer_process
from ember.core.checkpointing.async_writer import BackgroundWriter, SnapshotBuffers, snapshot
from ember.core.checkpointing.checkpoint_format import PLAIN_SCALARS, NotPlain, make_plain, walk_once
from ember.core.errors import CheckpointError, ConfigurationError

Op = tuple[str, str, Any]  # ("save" or "remove", path, what the storage gets or None)

#: A checkpoint of a CPU run whose tensors hold at most this many bytes is serialised on the training thread
#: rather than snapshotted (see :meth:`Writes.prepare`): for a small checkpoint pickling is mostly
#: Python work, cheaper there than on the writer thread, where it competes for the interpreter lock; a larger
#: one is copied into reused buffers faster than it is serialised (benchmarks/checkpoint_overhead.py
#: --stall-only: 7.6 MiB of weights, 1.2 ms copied against 3.7 ms serialised).
SERIALIZE_INLINE_BYTES = 1 << 20


def small_enough(obj: Any, limit: int | None = None) -> bool:
    """True when the tensors in the plain data ``obj`` hold at most ``limit`` bytes (their storages, as
    ``torch.save`` writes them; a storage shared by two tensors counts twice); by default
    :data:`SERIALIZE_INLINE_BYTES`."""
    limit = SERIALIZE_INLINE_BYTES if limit is None else limit
    return _tensor_bytes(obj, limit) <= limit


_LEAVES = PLAIN_SCALARS | {torch.dtype, torch.device}


def _tensor_bytes(obj: Any, limit: int) -> int:
    """The bytes of the tensors in ``obj``, counted until they pass ``limit``. One call per container and
    none per number or string: this runs at every save of a small checkpoint, on the training thread."""
    kind = type(obj)
    if kind is dict or kind is OrderedDict:
        values = obj.values()
    elif kind is list or kind is tuple:
        values = obj
    elif isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    else:
        return 0
    total = 0
    for value in values:
        kind = type(value)
        if kind in _LEAVES:
            continue
        if kind is torch.Tensor:
            total += value.untyped_storage().nbytes()
        else:
            total += _tensor_bytes(value, limit - total)
        if total > limit:
            break
    return total


class Writes:
    """The plan of one safe point's writes (see the module docstring)."""

    def __init__(self, trainer: Any, deferring: bool) -> None:
        self.trainer = trainer
        self.storage = trainer.role_plugins.get("checkpoint_io")
        impls = trainer.plugin_manager.hook.save_checkpoint.get_hookimpls()
        answering = [impl.plugin for impl in impls if not (impl.wrapper or impl.hookwrapper)]
        #: The storage is what writes: every other plugin answering ``save_checkpoint`` declares ``async_save``
        #: (DDP's answers for the ranks that write nothing; FSDP's writes its shards from a staged copy).
        self.storage_writes = all(p is self.storage or getattr(p, "async_save", False) for p in answering)
        self.background = deferring and self.storage_writes and bool(getattr(self.storage, "async_save", False))
        stagers = [p.stage_checkpoint for p in answering if callable(getattr(p, "stage_checkpoint", None))]
        self.stager: Callable[..., Any] | None = stagers[0] if self.background and stagers else None
        #: A plugin that stages writes its own files (a sharded directory, collectively): no links then.
        self.may_link = self.storage_writes and not stagers
        serialize = getattr(self.storage, "serialize_checkpoint", None)
        # Serialised bytes go to the storage's own save_checkpoint only: it must answer alone, unwrapped.
        self.serializer: Callable[[dict[str, Any]], Any] | None = serialize if (
            self.background and callable(serialize) and trainer.world_size == 1 and
            trainer.root_device.type == "cpu" and len(impls) == 1 and impls[0].plugin is self.storage) else None
        removers = trainer.plugin_manager.hook.remove_checkpoint.get_hookimpls()
        #: The storage's work goes to a writer process: no other plugin needs to see its calls.
        self.process = self.background and getattr(self.storage, "writer", "thread") == "process" and \
            trainer.world_size == 1 and [i.plugin for i in impls] == [self.storage] and \
            [i.plugin for i in removers] == [self.storage]

    def prepare(self, checkpoint: dict[str, Any], path: str, buffers: SnapshotBuffers) -> Any:
        """What the storage gets for ``checkpoint`` (just built), checked to be plain data: itself for a write
        on the training thread, else a form that belongs to this moment (see the module docstring). A small
        checkpoint is serialised rather than snapshotted because pickling on the writer thread would compete
        with the training thread for the interpreter lock and cost it more."""
        # Lightning's second names of plugin states (callbacks[state_key]) are walked once: see walk_once
        def plain(obj: dict[str, Any], tensor: Callable[[torch.Tensor], Any] | None = None) -> dict[str, Any]:
            return walk_once(obj, lambda c: make_plain(c, tensor=tensor))  # type: ignore[no-any-return]

        try:
            if self.stager is not None:
                return self.stager(trainer=self.trainer, checkpoint=plain(checkpoint))
            if self.process:  # copied into shared memory by submit()
                return plain(checkpoint)
            if self.serializer is not None:
                checkpoint = plain(checkpoint)
                # The size walk (names counted twice) is left out while the fit's last checkpoint serialised here
                # weighed at most half the limit: one that grew is caught by its own bytes, and the next walks.
                last = buffers.inline_bytes
                likely_small = last is not None and last <= SERIALIZE_INLINE_BYTES // 2
                data = self.serializer(checkpoint) if likely_small or small_enough(checkpoint) else None
                buffers.inline_bytes = None if data is None else len(data)
                if data is not None:
                    return data
            if self.background:
                return walk_once(checkpoint, lambda c: snapshot(c, buffers, lambda obj, tensor: make_plain(
                    obj, tensor=tensor)))
            return plain(checkpoint)
        except NotPlain as exc:
            raise CheckpointError(
                f"cannot write {path}: {exc} is not something torch.load(weights_only=True) can read "
                "back. A checkpoint holds tensors, numbers, strings and lists/tuples/dicts of them; "
                "convert the value in the on_save_checkpoint hook or state_dict() that stores it.") from None

    def start_process(self, writer: BackgroundWriter) -> None:
        """Start the writer process now when the writes go there: as a fit begins, so that it runs by the first
        save (see :meth:`WriterProcess.start_soon <ember.core.checkpointing.writer_process.WriterProcess.start_soon>`)."""
        if self.process:
            self._process_of(writer).start_soon()

    def _process_of(self, writer: BackgroundWriter) -> writer_process.WriterProcess:
        if writer.process is None:
            writer.process = writer_process.WriterProcess(self.storage)
        return writer.process  # type: ignore[no-any-return]

    def submit(self, writer: BackgroundWriter, hook: Any, ops: list[Op], buffers: SnapshotBuffers) -> None:
        """Hand ``ops`` (prepared at this safe point) to the writer process, or else to the writer thread."""
        if self.process:
            if self._process_of(writer).submit(ops):
                return
            snapshots: dict[int, Any] = {}  # a checkpoint the process cannot take: the thread writes a snapshot
            for _, _, checkpoint in ops:
                if checkpoint is not None and id(checkpoint) not in snapshots:
                    snapshots[id(checkpoint)] = walk_once(checkpoint, lambda c: snapshot(c, buffers))
            ops = [(op, path, None if c is None else snapshots[id(c)]) for op, path, c in ops]
        writer.submit(lambda at: self.carry_out(hook, ops, at))

    def carry_out(self, hook: Any, ops: list[Op], at: Callable[[str], None]) -> None:
        """The storage work, in order (on the training thread or the writer's). A checkpoint already written to
        one file goes to the next one as a link or a copy of those bytes, when the storage can."""
        t = self.trainer
        link = getattr(self.storage, "link_checkpoint", None) if self.may_link else None
        written: dict[int, str] = {}
        for op, path, checkpoint in ops:
            at(path)
            if op == "remove":
                hook.call("remove_checkpoint", trainer=t, path=path)
                continue
            source = written.get(id(checkpoint))
            if source is not None and callable(link) and link(trainer=t, source=source, path=path):
                continue
            if hook.call("save_checkpoint", trainer=t, checkpoint=checkpoint, path=path) is None:
                raise ConfigurationError("trainer.save_checkpoint() found no checkpoint-storage plugin; select "
                                         "one with Trainer(checkpoint_io='torch').")
            written[id(checkpoint)] = path
