"""What a checkpoint holds, and how a fit is restored from one.

The content is core's; where the bytes go is the checkpoint-storage role's (``save_checkpoint``,
``load_checkpoint``, ``remove_checkpoint``; ``checkpoint_io.torch`` by default). A full checkpoint is one
dict of tensors and plain containers, so it loads with ``torch.load(weights_only=True)``::

    format_version, ember_version, kind ("full" or "weights"), epoch, global_step,
    state_dict, hyper_parameters,                          # every checkpoint
    optimizer_states, lr_schedulers, loops["fit"],         # full checkpoints only
    rng, data["train"], results["train"], callback_metrics, grads (mid-window only),
    plugins[identity]                                      # each plugin's and callback's own state

``loops["fit"]`` is a :class:`FitProgress`: the counters and the safe point the checkpoint was written at.
While a fit trains, ``trainer.save_checkpoint`` (and so ``ModelCheckpoint``) only records the request; the
loop writes it at its next safe point: after the current batch and its validation, or between epochs. There
every plugin has finished with the event that asked for the save, so every state in the file belongs to one
moment, and resuming continues from that moment with every random generator as it was: a resumed run
computes the same numbers as one that never stopped. docs/checkpoints.md describes the guarantees.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import torch

from ember.core import rng
from ember.core.async_writer import BackgroundWriter, SnapshotBuffers, flush_all, snapshot
from ember.core.errors import CheckpointError, ConfigurationError
from ember.core.resumable_data import TrainData
from ember.core.signals import SignalHandlers, stop_exception
from ember.core.state import FitProgress

if TYPE_CHECKING:
    from ember.core.trainer import Trainer

log = logging.getLogger("ember")

#: The checkpoint format this ember writes; it reads this one and every older one. 2: a plugin's state is kept
#: only in ``plugins[key]`` (format 1 also had copies of some callbacks' states in a ``callbacks`` entry).
FORMAT_VERSION = 2
#: A multi-process fit agrees on stopping (after a signal) every this many batches: one small collective.
SIGNAL_SYNC_EVERY = 8

# ---------------------------------------------------------------------------------------------------------
# Plain data
# ---------------------------------------------------------------------------------------------------------

_SCALARS = frozenset({str, bytes, int, float, bool, complex, type(None)})
_TORCH_ATOMS = (torch.Tensor, torch.dtype, torch.device)
_SEQUENCES = frozenset({list, tuple, set, frozenset, torch.Size})


class NotPlain(Exception):
    """A value ``torch.load(weights_only=True)`` could not rebuild; ``args[0]`` says where it sits."""


def make_plain(obj: Any, where: str = "checkpoint") -> Any:
    """``obj`` with NumPy scalars turned into Python numbers (same values), or NotPlain naming the first value a
    weights-only load could not rebuild. Containers are copied only where something changed."""
    kind = type(obj)
    if kind in _SCALARS or isinstance(obj, _TORCH_ATOMS):
        return obj
    if kind.__module__ == "numpy" and callable(getattr(obj, "item", None)) and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    if kind in (dict, OrderedDict):
        items = {}
        changed = False
        for key, value in obj.items():
            if type(key) not in _SCALARS:
                raise NotPlain(f"{where} (the key {key!r}, a {type(key).__name__})")
            new = make_plain(value, f"{where}[{key!r}]")
            changed = changed or new is not value
            items[key] = new
        if not changed:
            return obj
        copy = kind(items)
        if kind is OrderedDict:
            copy.__dict__.update(vars(obj))  # a state_dict's _metadata
        return copy
    if kind in _SEQUENCES:
        values = [make_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if all(new is old for new, old in zip(values, obj, strict=True)):
            return obj
        return values if kind is list else kind(values)
    raise NotPlain(f"{where} (a {kind.__module__}.{kind.__qualname__})")


def _plain_value(value: Any) -> tuple[bool, Any]:
    try:
        return True, make_plain(value)
    except NotPlain:
        return False, value


def plain_hparams(module: Any, warned: set[str] | None = None) -> dict[str, Any]:
    """The module's ``hparams`` as plain data; a value that is not (a class, a function, ...) is left out
    with a warning, since a weights-only load could not rebuild it."""
    hparams = getattr(module, "hparams", None)
    if not isinstance(hparams, Mapping):
        return {}
    out = {}
    for key, value in hparams.items():
        ok, plain = _plain_value(value)
        if ok:
            out[str(key)] = plain
        elif warned is None or key not in warned:
            if warned is not None:
                warned.add(key)
            from ember.core.plugin_manager import EmberWarning

            warnings.warn(f"hyperparameter {key!r} ({type(value).__name__}) is not plain data and is left out of "
                          "checkpoints; pass it again to load_from_checkpoint(..., "
                          f"{key}=...) or exclude it with save_hyperparameters(ignore=[{key!r}]).",
                          EmberWarning, stacklevel=4)
    return out


def _results_state(results: Any) -> dict[str, Any]:
    """The epoch accumulators of ``self.log`` in training, so epoch metrics survive a mid-epoch resume."""
    out: dict[str, Any] = {}
    if results is None:
        return out
    for key, e in results.entries.items():
        if not e.on_epoch or callable(e.reduce_fx) or getattr(e, "metric", None) is not None \
                or not all(isinstance(v, torch.Tensor) for v in e.values):
            continue  # a callable reduction or a torchmetrics object restarts with the resumed epoch
        out[key] = {"on_step": e.on_step, "on_epoch": e.on_epoch, "prog_bar": e.prog_bar, "logger": e.logger,
                    "reduce_fx": e.reduce_fx, "sync_dist": e.sync_dist, "values": list(e.values),
                    "weights": list(e.weights), "partial": e.partial, "partial_weight": e.partial_weight}
    return out


def _restore_results(results: Any, state: Mapping[str, Any]) -> None:
    from ember.core.results import MetricEntry

    for key, s in state.items():
        entry = MetricEntry(key, s["on_step"], s["on_epoch"], s["prog_bar"], s["logger"], s["reduce_fx"],
                            s["sync_dist"])
        entry.values, entry.weights = list(s["values"]), list(s["weights"])
        entry.partial, entry.partial_weight = s["partial"], s["partial_weight"]
        results.entries[key] = entry


# ---------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------


def check_format(checkpoint: Any, path: str, allow_lightning: bool = False) -> dict[str, Any]:
    """``checkpoint`` if it is an ember checkpoint this ember can read, else a CheckpointError naming
    ``path`` and what is wrong."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} is not an ember checkpoint: it holds a {type(checkpoint).__name__}, not a "
                              "dict. Load plain tensors with torch.load(path, weights_only=True).")
    version = checkpoint.get("format_version")
    if version is None:
        if "pytorch-lightning_version" in checkpoint or "lightning_version" in checkpoint:
            if allow_lightning and "state_dict" in checkpoint:
                return checkpoint
            raise CheckpointError(f"{path} is a PyTorch Lightning checkpoint, which cannot resume an ember run. Load "
                                  "its weights with YourModule.load_from_checkpoint(path) and start a new fit.")
        if checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
            n = len(checkpoint)
            raise CheckpointError(f"{path} is not an ember checkpoint but a bare state_dict of {n} "
                                  f"tensor{'s' if n != 1 else ''}; load it with "
                                  "model.load_state_dict(torch.load(path, weights_only=True)).")
        keys = ", ".join(sorted(map(str, checkpoint))[:8]) or "none"
        raise CheckpointError(f"{path} is not an ember checkpoint: it has no 'format_version' entry (its keys: "
                              f"{keys}).")
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointError(f"{path} has an invalid format_version {version!r}: the file is damaged.")
    if version > FORMAT_VERSION:
        from ember import __version__

        written = checkpoint.get("ember_version", "a newer ember")
        raise CheckpointError(f"{path} was written in checkpoint format {version} (by ember {written}); this ember "
                              f"({__version__}) reads formats up to {FORMAT_VERSION}. Upgrade ember to load it.")
    if version < 2:
        _upgrade_from_1(checkpoint)
    return checkpoint


def _upgrade_from_1(checkpoint: dict[str, Any]) -> None:
    """Format 1 -> 2: the callback states format 1 also kept in a ``callbacks`` entry (EarlyStopping under
    ``identity[monitor]``, its key now, and Timer under its identity) move to ``plugins``; a state already
    under ``plugins`` wins."""
    legacy = checkpoint.pop("callbacks", None)
    if not isinstance(legacy, dict):
        return
    plugins = checkpoint.setdefault("plugins", {})
    for key, state in legacy.items():
        plugins.setdefault(key, state)


def storage_manager(checkpoint_io: Any = "torch") -> Any:
    """A plugin manager holding only a checkpoint-storage plugin, for loading outside a run."""
    from ember.core import discovery
    from ember.core.plugin_manager import PluginManager

    pm = PluginManager()
    if isinstance(checkpoint_io, str):
        info = discovery.discover().lookup("checkpoint_io", checkpoint_io)
        pm.register(info.load(), name=info.identity, origin=info.dist)
    else:
        pm.register(checkpoint_io, name=getattr(checkpoint_io, "identity", "checkpoint_io.custom"))
    return pm


def read(pm: Any, trainer: Trainer | None, path: str, weights_only: bool) -> Any:
    """Read ``path`` through the storage role of ``pm``."""
    from ember.core.dispatch import HookTable

    flush_all()  # a file still being written in the background is read complete
    checkpoint = HookTable(pm).call("load_checkpoint", trainer=trainer, path=path, weights_only=weights_only)
    if checkpoint is None:
        raise CheckpointError(f"cannot read {path}: no checkpoint-storage plugin answered load_checkpoint; "
                              "select one with Trainer(checkpoint_io='torch').")
    return checkpoint


def load_module(cls: type, path: str | os.PathLike, map_location: Any = None, strict: bool = True,
                weights_only: bool = True, checkpoint_io: Any = "torch", **overrides: Any) -> Any:
    """``Module.load_from_checkpoint``: build ``cls`` from the saved hyperparameters (``overrides`` win),
    load the weights, call the module's ``on_load_checkpoint``."""
    path = os.fspath(path)
    checkpoint = check_format(read(storage_manager(checkpoint_io), None, path, weights_only), path,
                              allow_lightning=True)
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    kwargs = {**hparams, **overrides}
    try:
        module = cls(**kwargs)
    except TypeError as exc:
        raise CheckpointError(f"could not build {cls.__name__}(**{sorted(kwargs)}) from {path}: {exc}. The "
                              "checkpoint's hyperparameters come from save_hyperparameters(); pass missing or "
                              "renamed arguments to load_from_checkpoint as keywords.") from exc
    state = checkpoint.get("state_dict")
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path} has no 'state_dict' entry with the module's weights.")
    on_load = getattr(module, "on_load_checkpoint", None)
    module.load_state_dict(state, strict=strict)
    if callable(on_load):
        on_load(checkpoint)
    if isinstance(map_location, (str, torch.device)):
        module.to(map_location)
    return module


# ---------------------------------------------------------------------------------------------------------
# The trainer's side
# ---------------------------------------------------------------------------------------------------------


def is_checkpoint_callback(plugin: Any) -> bool:
    """Checkpoint callbacks are recognised by their ``best_model_path`` attribute (Lightning's
    ``ModelCheckpoint`` interface)."""
    return not isinstance(plugin, type) and hasattr(plugin, "best_model_path")


class Checkpointing:
    """The trainer's checkpoint work: building, writing, restoring, resuming, stopping on a signal."""

    def __init__(self, trainer: Trainer) -> None:
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
        #: Writes of a training fit run here, one at a time (see :mod:`ember.core.async_writer`).
        self.writer = BackgroundWriter()
        self._buffers = SnapshotBuffers()
        #: The signal that asked the fit to stop, until the fit stops.
        self.stop_signal: int | None = None
        self.stop_requeue = False
        #: True when the loop must call :meth:`safe_point` at its next safe point.
        self.safe_point_due = False

    # -- building ----------------------------------------------------------------------------------------
    def build(self, weights_only: bool = False, batch_idx: int | None = None) -> dict[str, Any]:
        """The checkpoint of the trainer's current state; ``batch_idx``: written after that batch of the current
        epoch (else before the epoch's first batch). ``weights_only``: module weights and hyperparameters."""
        from ember import __version__

        t = self.trainer
        module = t.module
        checkpoint: dict[str, Any] = {
            "format_version": FORMAT_VERSION, "ember_version": __version__,
            "kind": "weights" if weights_only else "full",
            "epoch": t.current_epoch, "global_step": t.global_step,
            "state_dict": module.state_dict(),
            "hyper_parameters": plain_hparams(module, self._warned_hparams),
            "plugins": {},
        }
        if not weights_only:
            progress = t.loop.progress.snapshot(batch_idx)
            checkpoint["optimizer_states"] = [o.state_dict() for o in t.optimizers]
            checkpoint["lr_schedulers"] = [c.scheduler.state_dict() for c in t.lr_scheduler_configs]
            checkpoint["loops"] = {"fit": attrs.asdict(progress)}
            data = self.train_data
            checkpoint["rng"] = rng.capture(data.generators if data is not None else ())
            checkpoint["data"] = {"train": data.state()} if data is not None else {}
            checkpoint["results"] = {"train": _results_state(t.loop.train_results)}
            checkpoint["callback_metrics"] = {k: v.detach() for k, v in t.callback_metrics.items()
                                              if isinstance(v, torch.Tensor)}
            if self._mid_window(batch_idx):
                checkpoint["grads"] = [p.grad for p in module.parameters()]
            for key, plugin in self._stateful_plugins():
                checkpoint["plugins"][key] = plugin.state_dict()
        t.hook.call("on_save_checkpoint", trainer=t, module=module, checkpoint=checkpoint)
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
        """The one route of plugin state into and out of checkpoints: every plugin of the run (callbacks,
        plugins, always-on and role plugins, the DataModule) that has Lightning's ``state_dict()`` and
        ``load_state_dict(state)``, with the key its state is kept under in ``checkpoint["plugins"]``: its
        ``state_key`` if it has one, else its identity. Each plugin appears once; two under one key are an
        error (the second would overwrite the first)."""
        t = self.trainer
        candidates = list(t.extra_plugins) + list(t.autoload_plugins)
        candidates += [(t.role_identities[role], plugin) for role, plugin in t.role_plugins.items()]
        if t.datamodule is not None:
            candidates.append(("datamodule", t.datamodule))
        found: dict[str, Any] = {}
        seen: set[int] = set()
        for identity, plugin in candidates:
            if id(plugin) in seen or isinstance(plugin, (type, torch.nn.Module)):
                continue
            seen.add(id(plugin))
            if not (callable(getattr(plugin, "state_dict", None)) and callable(getattr(plugin, "load_state_dict",
                                                                                         None))):
                continue
            key = getattr(plugin, "state_key", None)
            key = key if isinstance(key, str) else identity
            if key in found:
                raise ConfigurationError(
                    f"two plugins keep their state under the same checkpoint key {key!r}: {found[key]!r} and "
                    f"{plugin!r}. Give one a distinct state_key (or identity) so that each is restored as saved.")
            found[key] = plugin
        return list(found.items())

    # -- writing and removing ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, weights_only: bool = False) -> None:
        """``trainer.save_checkpoint``: write now, or, while a fit trains, at the loop's next safe point."""
        if self.trainer.module is None:
            raise ConfigurationError("trainer.save_checkpoint() needs a model: call trainer.fit(model, ...) first.")
        if self._deferring:
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
        if not requests:
            return
        last = {os.path.abspath(p) for p in self.last_paths()}
        ordered = [r for r in requests if os.path.abspath(r[1]) not in last] + \
            [r for r in requests if os.path.abspath(r[1]) in last]
        self._write(ordered, batch_idx)

    def last_paths(self) -> list[str]:
        """The "last" checkpoints the plugins keep (``last_checkpoint_path``), or the default one."""
        t = self.trainer
        answers = t.hook.call("last_checkpoint_path", trainer=t)
        paths = list(dict.fromkeys(os.fspath(p) for p in answers if p))
        return paths or [os.path.join(t.default_root_dir, "checkpoints", "last.ckpt")]

    def _write(self, requests: list[tuple[str, str, bool]], batch_idx: int | None = None) -> None:
        """Carry out saves and removals in order; each kind of checkpoint is built (and serialised) once. While
        a fit trains and the storage allows it, the writing runs in the background on a snapshot."""
        t = self.trainer
        self.writer.wait()  # in order with the write in flight; raises its error
        background = self._deferring and bool(getattr(t.role_plugins.get("checkpoint_io"), "async_save", False))
        built: dict[bool, dict[str, Any]] = {}
        ops: list[tuple[str, str, dict[str, Any] | None]] = []
        with self._plugins_registered() as hook:
            for op, path, weights_only in requests:
                if op == "remove":
                    ops.append((op, path, None))
                    continue
                if weights_only not in built:
                    checkpoint = self._build_plain(path, weights_only, batch_idx)
                    built[weights_only] = snapshot(checkpoint, self._buffers) if background else checkpoint
                ops.append((op, path, built[weights_only]))
            if background:
                self.writer.submit(lambda at: self._carry_out(hook, ops, at))
            else:
                self._carry_out(hook, ops, lambda path: None)
            if t.world_size > 1 and built:
                hook.call("barrier", trainer=t, name="save_checkpoint")

    def _build_plain(self, path: str, weights_only: bool, batch_idx: int | None) -> dict[str, Any]:
        try:
            return make_plain(self.build(weights_only, batch_idx))
        except NotPlain as exc:
            raise CheckpointError(
                f"cannot write {path}: {exc} is not something torch.load(weights_only=True) can read "
                "back. A checkpoint holds tensors, numbers, strings and lists/tuples/dicts of them; "
                "convert the value in the on_save_checkpoint hook or state_dict() that stores it.") from None

    def _carry_out(self, hook: Any, ops: list[tuple[str, str, dict[str, Any] | None]],
                   at: Callable[[str], None]) -> None:
        """The storage work of :meth:`_write` (on the training thread or the writer's). A checkpoint already
        written to one file goes to the next one as a link or a copy of those bytes, when the storage can."""
        t = self.trainer
        link = getattr(t.role_plugins.get("checkpoint_io"), "link_checkpoint", None)
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

    @contextlib.contextmanager
    def _plugins_registered(self) -> Iterator[Any]:
        """The run's plugins, registered for the duration (already so inside a run)."""
        t = self.trainer
        if t.state.status == "running":
            yield t.hook
            return
        registered = t.register_run_plugins(t.module, t.datamodule)
        try:
            yield t.hook
        finally:
            for plugin in reversed(registered):
                t.plugin_manager.unregister(plugin)

    # -- reading and restoring -------------------------------------------------------------------------
    def resolve(self, ckpt_path: Any) -> str | None:
        """``"last"``, ``"best"`` or a path, as a file to read (None: ``"last"`` found nothing)."""
        t = self.trainer
        if ckpt_path == "last":
            paths = self.last_paths()
            existing = [p for p in paths if os.path.exists(p)]
            if not existing:
                log.warning("ckpt_path='last': no checkpoint at %s yet; starting from the beginning",
                            " or ".join(paths))
                return None
            return max(existing, key=os.path.getmtime)
        if ckpt_path == "best":
            cb = t.checkpoint_callback
            best = getattr(cb, "best_model_path", "") if cb is not None else ""
            if not best:
                raise ConfigurationError("ckpt_path='best' needs a checkpoint callback that has saved a best model "
                                         "(ModelCheckpoint with monitor=...); none has.")
            return best
        if not isinstance(ckpt_path, (str, os.PathLike)):
            raise ConfigurationError(f"ckpt_path={ckpt_path!r} is invalid: pass a file path, 'last' or 'best'.")
        return os.fspath(ckpt_path)

    def restore(self, ckpt_path: Any, weights_only: bool = True) -> None:
        """``Loops.restore``: read the checkpoint and load the module's weights now; for a fit, keep the rest
        for :meth:`restore_training`, once the optimizers exist."""
        t = self.trainer
        path = self.resolve(ckpt_path)
        if path is None:
            return
        checkpoint = check_format(read(t.plugin_manager, t, path, weights_only), path)
        fn = t.state.fn
        if fn == "fit" and checkpoint.get("kind") == "weights":
            raise CheckpointError(f"{path} holds weights only (saved with weights_only=True), which cannot resume "
                                  "a fit. Load it with YourModule.load_from_checkpoint(path), or resume from a full "
                                  "checkpoint.")
        state = checkpoint.get("state_dict")
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{path} has no 'state_dict' entry with the module's weights.")
        t.module.load_state_dict(state)
        t.ckpt_path = path
        if fn == "fit":
            self._pending = checkpoint
            return
        if t.hook.on_load_checkpoint is not None:
            t.hook.on_load_checkpoint(trainer=t, module=t.module, checkpoint=checkpoint)

    def restore_training(self) -> FitProgress | None:
        """Restore optimizers, schedulers, loop progress, metrics and plugin states from the checkpoint read by
        :meth:`restore`. Returns where the fit resumes, or None when not resuming."""
        checkpoint, self._pending = self._pending, None
        if checkpoint is None:
            return None
        t = self.trainer
        path = t.ckpt_path
        loops = checkpoint.get("loops")
        if not isinstance(loops, Mapping) or not isinstance(loops.get("fit"), Mapping):
            raise CheckpointError(f"{path} has no loop progress (loops['fit']): it cannot resume a fit.")
        progress = FitProgress.from_dict(loops["fit"])
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
        t.loop.progress.restore(progress)
        _restore_results(t.loop.train_results, checkpoint.get("results", {}).get("train", {}))
        t.callback_metrics.update(checkpoint.get("callback_metrics", {}))
        states = checkpoint.get("plugins", {})
        for key, plugin in self._stateful_plugins():
            if key in states:
                plugin.load_state_dict(states[key])
        if t.hook.on_load_checkpoint is not None:
            t.hook.on_load_checkpoint(trainer=t, module=t.module, checkpoint=checkpoint)
        self._resume_rng = checkpoint.get("rng")
        self._resume_data = checkpoint.get("data", {}).get("train", {})
        log.info("resuming from %s: epoch %d, global step %d, %s", path, progress.epoch, progress.global_step,
                 f"after batch {progress.batch_idx}" if progress.phase == "batch" else "at the start of the epoch")
        return progress

    def restore_rng(self) -> None:
        """Put every generator back as it was when the checkpoint was written (once, at the resume point)."""
        state, self._resume_rng = self._resume_rng, None
        if state is not None:
            rng.restore(state, self.train_data.generators if self.train_data is not None else ())

    # -- the training data -----------------------------------------------------------------------------
    def train_loader(self, loader: Any) -> Any:
        """The resumable form of the fit's training loader (see :mod:`ember.core.resumable_data`)."""
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
        self._requests = []
        self._deferring = True
        # A multi-process fit polls at every safe point: a signal may reach another process first.
        self.safe_point_due = t.world_size > 1
        handlers = SignalHandlers(t)  # Ctrl-C and SIGTERM stop at a safe point, checkpointing or not
        handlers.install()
        try:
            yield
            if self.stop_signal is not None:  # the signal came after the last safe point
                self._stop()
        except BaseException:
            self.writer.wait_quietly()  # the pending write completes; its failure must not hide this one
            raise
        else:
            self.writer.wait()
        finally:
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
        """Stop at the next safe point (see :func:`ember.core.signals.request_stop`)."""
        self.stop_signal = signum
        self.stop_requeue = self.stop_requeue or requeue
        self.safe_point_due = True

    def safe_point(self, batch_idx: int | None = None) -> None:
        """The loop is at a safe point (after batch ``batch_idx`` and its validation, or between epochs): write
        the requested checkpoints; stop if a signal asked to (on any process)."""
        t = self.trainer
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
        self.safe_point_due = polling or self.stop_signal is not None
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


def check_optimizer_state(index: int, optimizer: Any, state: Any, path: str | None) -> None:
    """A CheckpointError, before anything is loaded, when ``state`` cannot be this optimizer's: other parameter
    groups, other group sizes, or another kind of optimizer (torch would fail later, or silently misbehave)."""
    name = type(optimizer).__name__
    groups = state.get("param_groups") if isinstance(state, Mapping) else None
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise CheckpointError(f"{path}: the state of optimizer {index} has no parameter groups: it is damaged.")
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(f"{path}: optimizer {index} ({name}) has {len(optimizer.param_groups)} parameter "
                              f"group(s) in this run, {len(groups)} in the checkpoint. configure_optimizers() must "
                              "build the groups it built when the checkpoint was written.")
    for g, (saved, current) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        extra = sorted(set(saved) - set(current) - {"params"})
        if extra:
            raise CheckpointError(
                f"{path}: parameter group {g} of optimizer {index} was saved by an optimizer with the settings "
                f"{extra}, which this run's {name} does not have: configure_optimizers() returns another kind of "
                "optimizer than when the checkpoint was written (e.g. SGD then, Adam now). Resume with the same "
                "optimizer, or load only the weights (Module.load_from_checkpoint) and start a new fit.")
        if len(saved.get("params", ())) != len(current["params"]):
            raise CheckpointError(f"{path}: parameter group {g} of optimizer {index} ({name}) holds "
                                  f"{len(current['params'])} parameters in this run, {len(saved.get('params', ()))} "
                                  "in the checkpoint: the model or its parameter groups changed.")


def _load_list(what: str, objects: list[Any], states: list[Any], path: str | None) -> None:
    if len(objects) != len(states):
        raise CheckpointError(f"{path} holds {len(states)} {what} state(s), but this run has {len(objects)}; "
                              "configure_optimizers() must return what it returned when the checkpoint was written.")
    for obj, state in zip(objects, states, strict=True):
        obj.load_state_dict(state)


