"""What a checkpoint holds, and how a fit is restored from one.

The content is core's; where the bytes go is the checkpoint-storage role's (``save_checkpoint``,
``load_checkpoint``, ``remove_checkpoint``; ``checkpoint_io.torch`` by default). A full checkpoint is one
dict of tensors and plain containers, so it loads with ``torch.load(weights_only=True)``::

    format_version, ember_version, kind ("full" or "weights"), epoch, global_step,
    state_dict, hyper_parameters,                          # every checkpoint
    optimizer_states, lr_schedulers, loops["fit"],         # full checkpoints only
    rng, data["train"], results["train"], callback_metrics, grads (mid-window only),
    plugins[identity]                                      # each plugin's and callback's own state
    callbacks[state_key], <DataModule class name>          # Lightning's names for the same state objects

``loops["fit"]`` is a :class:`FitProgress`: the counters and the safe point the checkpoint was written at.
While a fit trains, ``trainer.save_checkpoint`` (and so ``ModelCheckpoint``) only records the request; the
loop writes it at its next safe point: after the current batch and its validation, or between epochs. There
every plugin has finished with the event that asked for the save, so every state in the file belongs to one
moment, and resuming continues from that moment with every random generator as it was: a resumed run
computes the same numbers as one that never stopped. docs/checkpoints.md describes the guarantees.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ember.core.checkpointing import plugin_state
from ember.core.checkpointing.async_writer import BackgroundWriter, SnapshotBuffers
from ember.core.checkpointing.checkpoint_format import (
    FORMAT_VERSION,
    add_lightning_names,
    check_format,
    check_optimizer_state,
    check_weights,
    hparams_entries,
    note_weights,
    read,
    weights_known,
)
from ember.core.checkpointing.checkpoint_paths import (
    AUTO,
    CURRENT,
    CheckpointPaths,
    announce,
    checkpoint_dirs,
    default_checkpoint_dir,
    run_dir,
)
from ember.core.checkpointing.checkpoint_writes import Op, Writes
from ember.core.checkpointing.restarts import RESTART, restart_count, restartable, resume_point
from ember.core.errors import CheckpointError, NoModelError
from ember.core.hooks.positional import STYLE_ATTR
from ember.core.loop import rng
from ember.core.loop.parts import RunningTrainer
from ember.core.loop.resumable_data import TrainData
from ember.core.loop.signals import SignalHandlers, stop_exception
from ember.core.loop.state import FitProgress

if TYPE_CHECKING:
    from ember.core.loop.loops import Loops

log = logging.getLogger("ember")


class CheckpointedTrainer(RunningTrainer, Protocol):
    """What checkpointing uses of the Trainer: the loop's records and the run's plugins, to save and restore."""

    loop: Loops
    role_plugins: dict[str, Any]
    role_identities: dict[str, str]
    extra_plugins: list[tuple[str, Any]]
    autoload_plugins: list[tuple[str, Any]]

    def register_run_plugins(self, model: Any, datamodule: Any) -> list[Any]: ...

#: A multi-process fit agrees on stopping (after a signal) every this many batches: one small collective.
SIGNAL_SYNC_EVERY = 8


__all__ = ["AUTO", "CURRENT", "Checkpointing", "announce", "default_checkpoint_dir", "is_checkpoint_callback",
           "note_weights", "run_dir", "weights_known"]


_MISSING = object()


def is_checkpoint_callback(plugin: Any) -> bool:
    """Checkpoint callbacks are recognised by their ``best_model_path`` attribute (Lightning's
    ``ModelCheckpoint`` interface): one they have, not one a ``__getattr__`` answers for any name (Lightning's
    ``DummyLogger``)."""
    return not isinstance(plugin, type) and \
        inspect.getattr_static(plugin, "best_model_path", _MISSING) is not _MISSING


class Checkpointing:
    """The trainer's checkpoint work: building, writing, restoring, resuming, stopping on a signal."""

    def __init__(self, trainer: CheckpointedTrainer) -> None:
        self.trainer = trainer
        self.train_data: TrainData | None = None
        self._pending: dict[str, Any] | None = None  # read, waiting for the optimizers to exist
        self._resume_rng: dict[str, Any] | None = None
        self._resume_data: dict[str, Any] = {}
        self._warned_hparams: set[str] = set()
        self._polls = 0
        #: While a fit trains, saves and removals wait here for the loop's next safe point.
        self._deferring = False
        self._requests: list[tuple[str, str, bool]] = []
        self._requested_epoch: int | None = None  # current_epoch at the first of the waiting saves
        #: Writes of a training fit run here, one at a time (see :mod:`ember.core.checkpointing.async_writer`).
        self.writer = BackgroundWriter()
        self._buffers = SnapshotBuffers()
        #: The signal that asked the fit to stop, until the fit stops.
        self.stop_signal: int | None = None
        self.stop_requeue = False
        #: True when the loop must call :meth:`safe_point` at its next safe point.
        self.safe_point_due = False
        #: In a restartable run, the "last" checkpoint is saved every this many optimizer steps (0: never).
        self._restart_every = 0
        self._restart_saved_at = -1

    # -- building ----------------------------------------------------------------------------------------
    def build(self, weights_only: bool = False, batch_idx: int | None = None,
              epoch: int | None = None) -> dict[str, Any]:
        """The checkpoint of the trainer's current state; ``batch_idx``: written after that batch of the current
        epoch (else before the epoch's first batch). ``weights_only``: module weights and hyperparameters.
        ``epoch``: the ``current_epoch`` when the save was asked for (Lightning's ``"epoch"``), if not now."""
        from ember.version import __version__

        t = self.trainer
        module = t.module
        checkpoint: dict[str, Any] = {
            "format_version": FORMAT_VERSION, "ember_version": __version__,
            "kind": "weights" if weights_only else "full",
            "epoch": t.current_epoch if epoch is None else epoch, "global_step": t.global_step,
            "state_dict": module.state_dict(),
            "plugins": {},
        }
        checkpoint.update(hparams_entries((module, t.datamodule), self._warned_hparams))
        if not weights_only:
            checkpoint["optimizer_states"] = [o.state_dict() for o in t.optimizers]
            checkpoint["lr_schedulers"] = [c.scheduler.state_dict() for c in t.lr_scheduler_configs]
            checkpoint.update(t.loop.state_dict(batch_idx))  # loops["fit"], results["train"], callback_metrics
            data = self.train_data
            checkpoint["rng"] = rng.capture(data.generators if data is not None else ())
            checkpoint["data"] = {"train": data.state()} if data is not None else {}
            if self._mid_window(batch_idx):
                checkpoint["grads"] = [p.grad for p in module.parameters()]
            names: dict[str, str] = {}
            for key, plugin in plugin_state.stateful(t, names):
                checkpoint["plugins"][key] = plugin.state_dict()
            dm = t.datamodule
            add_lightning_names(checkpoint, names, type(dm).__qualname__ if dm is not None else None)
        if weights_only:  # as in Lightning, a weights-only file calls no Lightning-style callback's hook
            hook = functools.partial(t.hook.call_some, "on_save_checkpoint",
                                     lambda p: getattr(type(p), STYLE_ATTR, None) != "callback")
        else:
            hook = functools.partial(t.hook.call, "on_save_checkpoint")
        # no self.log in on_save_checkpoint (Lightning)
        t.loop.log_context.call_refusing("on_save_checkpoint", hook, trainer=t, module=module, checkpoint=checkpoint)
        if weights_only:
            checkpoint.pop("plugins", None)
        return checkpoint

    def _mid_window(self, batch_idx: int | None) -> bool:
        """Gradients accumulated but not yet stepped must travel with the checkpoint."""
        t = self.trainer
        if not any(p.grad is not None for p in t.module.parameters()):
            return False
        if not getattr(t.module, "automatic_optimization", True):
            return True
        return batch_idx is not None and (batch_idx + 1) % t.config.accumulate_grad_batches != 0

    def _stateful_plugins(self) -> list[tuple[str, Any]]:
        """The run's plugins that keep state in checkpoints, with their keys (:func:`plugin_state.stateful`)."""
        return plugin_state.stateful(self.trainer)

    # -- writing and removing ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, weights_only: bool = False) -> None:
        """``trainer.save_checkpoint``: write now, or, while a fit trains, at the loop's next safe point."""
        if self.trainer.module is None:
            raise NoModelError("trainer.save_checkpoint() needs a model. Saving a checkpoint is only possible if a "
                               "model is attached to the Trainer: call trainer.fit(model, ...) (or validate, test, "
                               "predict) first.")
        if self._deferring:
            if self._requested_epoch is None:  # the file's "epoch" is the one that asked, as in Lightning
                self._requested_epoch = self.trainer.current_epoch
            self._requests.append(("save", os.fspath(path), weights_only))
            self.safe_point_due = True
            return
        self._write([("save", os.fspath(path), weights_only)])

    def remove(self, path: str | os.PathLike) -> None:
        """``trainer.remove_checkpoint``: in order with the saves requested before it."""
        if self._deferring and self._requests:
            self._requests.append(("remove", os.fspath(path), False))
            return
        self._write([("remove", os.fspath(path), False)])

    def _flush(self, batch_idx: int | None = None) -> None:
        """Write the requested checkpoints. The file ``ckpt_path="last"`` resumes from goes last: when it holds
        the new state, every other file of the same moment is complete (and a crash before it leaves the old
        one, whose continuation writes them all again)."""
        requests, self._requests = self._requests, []
        epoch, self._requested_epoch = self._requested_epoch, None
        if not requests:
            return
        last = {os.path.abspath(p) for p in self.last_paths()}
        is_last = [os.path.abspath(r[1]) in last for r in requests]
        ordered = [r for r, x in zip(requests, is_last, strict=True) if not x] + \
            [r for r, x in zip(requests, is_last, strict=True) if x]
        self._write(ordered, batch_idx, epoch)

    def last_paths(self) -> list[str]:
        """The "last" checkpoints the plugins keep (``last_checkpoint_path``), or the default one."""
        t = self.trainer
        answers = t.hook.call("last_checkpoint_path", trainer=t)
        paths = list(dict.fromkeys(os.fspath(p) for p in answers if p))
        if paths:
            return paths
        dirs = checkpoint_dirs(t)
        return [os.path.join(dirs[0] if dirs else default_checkpoint_dir(t), "last.ckpt")]

    def _write(self, requests: list[tuple[str, str, bool]], batch_idx: int | None = None,
               epoch: int | None = None) -> None:
        """Carry out saves and removals in order; each kind of checkpoint is built (and serialised) once. While
        a fit trains and the plugins allow it, the writing runs in the background (see
        :mod:`ember.core.checkpointing.checkpoint_writes`)."""
        t = self.trainer
        self.writer.wait()  # in order with the write in flight; raises its error
        built: dict[bool, Any] = {}
        ops: list[Op] = []
        with self.plugins_registered() as hook:
            writes = Writes(t, self._deferring)
            for op, path, weights_only in requests:
                if op == "remove":
                    ops.append((op, path, None))
                    continue
                if weights_only not in built:
                    built[weights_only] = writes.prepare(self.build(weights_only, batch_idx, epoch), path,
                                                         self._buffers)
                ops.append((op, path, built[weights_only]))
            if writes.background:
                writes.submit(self.writer, hook, ops, self._buffers)
            else:
                writes.carry_out(hook, ops, lambda path: None)
            if t.world_size > 1 and built:
                hook.call("barrier", trainer=t, name="save_checkpoint")

    @contextlib.contextmanager
    def plugins_registered(self) -> Iterator[Any]:
        """The run's plugins, registered for the duration (already so inside a run, its ``on_exception`` included)."""
        t = self.trainer
        if t.state.status == "running" or t.plugin_manager.has_plugin("core.defaults"):
            yield t.hook
            return
        registered = t.register_run_plugins(t.module, t.datamodule)
        try:
            yield t.hook
        finally:
            for plugin in reversed(registered):
                if plugin is not None:  # (no module yet: a Trainer asked before any run)
                    t.plugin_manager.unregister(plugin)

    # -- reading and restoring -------------------------------------------------------------------------
    def ckpt_path_for(self, fn: str, model: Any, ckpt_path: Any) -> Any:
        """The ``ckpt_path`` a run of ``fn`` uses: as given, else :data:`AUTO` for an evaluation of weights from no fit
        or checkpoint, and for a fit the checkpoint a failed fit left, if any (``CheckpointPaths.AFTER_FAILURE``)."""
        if fn == "fit":
            note_weights(model, "fit")
            if ckpt_path is None and restart_count() > 0 and restartable():
                return RESTART  # a worker died and the group was started again: continue where the run was
            return CheckpointPaths.AFTER_FAILURE if ckpt_path is None else ckpt_path
        if ckpt_path is None and not weights_known(model):
            return AUTO
        return ckpt_path

    def resolve(self, ckpt_path: Any) -> str | None:
        """``"last"``, ``"best"``, ``AUTO``, ``"current"`` or a path, as a file to read (None: none to read); see
        :class:`ember.core.checkpointing.checkpoint_paths.CheckpointPaths`."""
        if ckpt_path == RESTART:
            return resume_point(self.trainer, self.last_paths)
        return CheckpointPaths(self.trainer, self.last_paths).resolve(ckpt_path)

    def restore(self, ckpt_path: Any, weights_only: bool = True) -> None:
        """``Loops.restore``, after ``configure_model``, in Lightning's order: read the checkpoint, call the
        module's ``on_load_checkpoint`` (it may rename or convert ``checkpoint["state_dict"]``), load the weights,
        call the other plugins' ``on_load_checkpoint`` and, for a fit, give them their states (callbacks, the
        DataModule); keep the rest for :meth:`restore_training`, once ``configure_optimizers`` has run."""
        t = self.trainer
        auto = ckpt_path == AUTO
        path = self.resolve(ckpt_path)
        if path is None:
            return
        if ckpt_path in ("last", "best") and t.is_global_zero:
            announce(t, f"ckpt_path={ckpt_path!r}: {'resuming from' if t.state.fn == 'fit' else 'loading'} {path}")
        checkpoint = check_format(read(t.plugin_manager, t, path, weights_only), path)
        fn = t.state.fn
        if fn == "fit" and checkpoint.get("kind") == "weights":
            raise CheckpointError(f"{path} holds weights only (saved with weights_only=True), which cannot resume "
                                  "a fit. Load it with YourModule.load_from_checkpoint(path), or resume from a full "
                                  "checkpoint.")
        t.ckpt_path = path  # (the hooks see it, as in Lightning)
        plugin_state.on_load_checkpoint(t, checkpoint, module=True)
        state = checkpoint.get("state_dict")
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{path} has no 'state_dict' entry with the module's weights.")
        how = ("It was picked as the latest fit of this run name because no ckpt_path was given; pass "
               "ckpt_path=PATH (or 'current' for the model's own weights)." if auto else
               f"It was found for ckpt_path={ckpt_path!r}; pass another path, or another default_root_dir or logger "
               "name for a new experiment." if ckpt_path in ("last", "best") else "")
        strict = getattr(t.module, "strict_loading", True) is not False  # LightningModule.strict_loading
        check_weights(t.module, state, path, checkpoint, hint=how, strict=strict)
        t.module.load_state_dict(state, strict=strict)
        note_weights(t.module, path)
        plugin_state.on_load_checkpoint(t, checkpoint, module=False)
        if fn == "fit":
            plugin_state.restore(t, self._stateful_plugins(), checkpoint.get("plugins", {}), path)
            self._pending = checkpoint

    def dump(self, weights_only: bool = False) -> dict[str, Any]:
        """The checkpoint a save would write now, as a dict (the run's plugins' ``on_save_checkpoint`` called),
        written nowhere."""
        with self.plugins_registered():
            return self.build(weights_only)

    def restore_weights_and_plugins(self, path: str) -> dict[str, Any]:
        """Load the module's weights and every plugin's state (callbacks, the DataModule) from the full checkpoint
        at ``path``, outside a fit; the optimizers and the loop's progress are left as they are. Returns the
        checkpoint read."""
        t = self.trainer
        with self.plugins_registered():
            checkpoint = check_format(read(t.plugin_manager, t, path, True), path)
            if checkpoint.get("kind") == "weights":
                raise CheckpointError(f"{path} holds the module's weights only (saved with weights_only=True): there "
                                      "is no callback or DataModule state to restore. Load it with "
                                      "YourModule.load_from_checkpoint(path).")
            check_weights(t.module, checkpoint["state_dict"], path, checkpoint)
            t.module.load_state_dict(checkpoint["state_dict"])
            note_weights(t.module, path)
            plugin_state.restore(t, self._stateful_plugins(), checkpoint.get("plugins", {}), path)
        return checkpoint

    def restore_training(self) -> FitProgress | None:
        """Restore optimizers, schedulers, loop progress and metrics from the checkpoint read by :meth:`restore`.
        Returns where the fit resumes, or None when not resuming."""
        checkpoint, self._pending = self._pending, None
        if checkpoint is None:
            return None
        t = self.trainer
        path = t.ckpt_path
        states = checkpoint.get("optimizer_states", [])
        if len(states) == len(t.optimizers):  # else _load_list names the counts
            for i, (optimizer, state) in enumerate(zip(t.optimizers, states, strict=True)):
                check_optimizer_state(i, optimizer, state, path)
        _load_list("optimizer", t.optimizers, states, path)
        _load_list("learning-rate scheduler", [c.scheduler for c in t.lr_scheduler_configs],
                   checkpoint.get("lr_schedulers", []), path)
        grads = checkpoint.get("grads")
        if grads is not None:
            params = list(t.module.parameters())
            if len(params) != len(grads):
                raise CheckpointError(f"{path} holds gradients for {len(grads)} parameters; the module has "
                                      f"{len(params)}.")
            for p, g in zip(params, grads, strict=True):
                p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype)
        progress = t.loop.load_state_dict(checkpoint, path)  # the counters, self.log's epoch values, metrics
        self._resume_rng = checkpoint.get("rng")
        self._resume_data = checkpoint.get("data", {}).get("train", {})
        where = f"after batch {progress.batch_idx}" if progress.phase == "batch" else "at the start of the epoch"
        if restart_count() > 0 and restartable():
            announce(t, f"resumed from {path}: epoch {progress.epoch}, global step {progress.global_step}, {where}")
        else:
            log.info("resuming from %s: epoch %d, global step %d, %s", path, progress.epoch, progress.global_step,
                     where)
        return progress

    def restore_rng(self) -> None:
        """Put every generator back as it was when the checkpoint was written (once, at the resume point)."""
        state, self._resume_rng = self._resume_rng, None
        if state is not None:
            rng.restore(state, self.train_data.generators if self.train_data is not None else ())

    # -- the training data -----------------------------------------------------------------------------
    def train_loader(self, loader: Any) -> Any:
        """The resumable form of the fit's training loader (see :mod:`ember.core.loop.resumable_data`)."""
        self.train_data = TrainData(loader)
        return self.train_data.loader

    def resumed_batches(self, skip: int) -> Iterator[Any]:
        """The resumed epoch's batches from batch ``skip`` on."""
        assert self.train_data is not None
        data, self._resume_data = self._resume_data, {}
        return self.train_data.resumed_iterator(data, skip)

    # -- one fit -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def fitting(self) -> Iterator[None]:
        """Around a fit: deferred saves, signal handlers (with checkpointing enabled), clean-up afterwards."""
        t = self.trainer
        self.stop_signal, self.stop_requeue, self._polls = None, False, 0
        self._requests, self._requested_epoch = [], None
        self._deferring = True
        self._restart_every = t.config.restart_save_every_n_steps if restartable() else 0
        self._restart_saved_at = -1
        # A multi-process fit polls at every safe point: a signal may reach another process first; a restartable
        # one looks there whether its periodic save is due.
        self.safe_point_due = t.world_size > 1 or self._restart_every > 0
        handlers = SignalHandlers(t)  # Ctrl-C and SIGTERM stop at a safe point, checkpointing or not
        handlers.install()
        try:
            if t.config.enable_checkpointing:  # a writer process starts now, not at the first save
                Writes(t, self._deferring).start_process(self.writer)
            yield
            if self.stop_signal is not None:  # the signal came after the last safe point
                self._stop()
        except BaseException:
            self.writer.wait_quietly()  # the pending write completes; its failure must not hide this one
            raise
        else:
            self.writer.wait()
        finally:
            self.writer.close()  # no writer thread or process outlives the fit
            self._buffers.clear()
            handlers.uninstall()
            self._deferring = False
            self._requests = []
            self.train_data = None
            self._pending = self._resume_rng = None
            self._resume_data = {}
            self.safe_point_due = False

    def end_training(self) -> None:
        """The training loop is over: write what is pending; later saves (``on_train_end``, ...) write at once."""
        self._deferring = False
        self.safe_point_due = self.stop_signal is not None
        self._flush()
        self.writer.wait()  # on_train_end and later find every file complete

    def request_stop(self, signum: int, requeue: bool) -> None:
        """Stop at the next safe point (see :func:`ember.core.loop.signals.request_stop`)."""
        self.stop_signal = signum
        self.stop_requeue = self.stop_requeue or requeue
        self.safe_point_due = True

    def safe_point(self, batch_idx: int | None = None) -> None:
        """The loop is at a safe point (after batch ``batch_idx`` and its validation, or between epochs): write
        the requested checkpoints; stop if a signal asked to (on any process)."""
        t = self.trainer
        step = t.global_step
        if self._restart_every and step and step % self._restart_every == 0 and step != self._restart_saved_at:
            self._restart_saved_at = step  # every rank decides alike, at the first safe point of that step
            self._requests += [("save", p, False) for p in self.last_paths()
                               if ("save", p, False) not in self._requests]
        self._flush(batch_idx)
        stop = self.stop_signal is not None
        if batch_idx is not None and stop and self._mid_window(batch_idx) and \
                getattr(t.module, "automatic_optimization", True):
            stop = False  # finish the accumulation window first: no gradients to carry
        polling = t.world_size > 1
        if polling:
            self._polls += 1
            if self._polls % SIGNAL_SYNC_EVERY:
                return
            stop = bool(t.hook.reduce_boolean_decision(trainer=t, decision=stop, all=False))
        self.safe_point_due = polling or self.stop_signal is not None or self._restart_every > 0
        if stop:
            self._stop(batch_idx)

    def _stop(self, batch_idx: int | None = None) -> None:
        t = self.trainer
        signum = self.stop_signal if self.stop_signal is not None else int(signal.SIGTERM)
        paths = self.last_paths() if t.config.enable_checkpointing else []
        self._write([("save", p, False) for p in paths], batch_idx)
        self.writer.wait()  # the file is complete before the process is requeued or exits
        log.warning("%s; stopping on %s", f"saved {' and '.join(paths)}" if paths else "checkpointing is off, nothing "
                    "saved", signal.Signals(signum).name)
        path = paths[0] if paths else None
        if t.hook.requeue is not None and path is not None:
            t.hook.requeue(trainer=t, signum=signum, checkpoint_path=path, requested=self.stop_requeue)
        self.stop_signal = None
        raise stop_exception(signum, path)


def _load_list(what: str, objects: list[Any], states: list[Any], path: str | None) -> None:
    if len(objects) != len(states):
        raise CheckpointError(f"{path} holds {len(states)} {what} state(s), but this run has {len(objects)}; "
                              "configure_optimizers() must return what it returned when the checkpoint was written.")
    for obj, state in zip(objects, states, strict=True):
        obj.load_state_dict(state)


