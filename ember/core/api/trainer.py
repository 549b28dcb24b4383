"""``ember.Trainer``: selects the run's plugins, then drives the loops in :mod:`ember.core.loop.loops`."""

from __future__ import annotations

import functools
import logging
import math
import os
import warnings
from typing import TYPE_CHECKING, Any

import attrs
import torch

from ember.core.api import logging_api, null_logger
from ember.core.api.role_plugins import note_selected, planned_root_device
from ember.core.api.trainer_properties import TrainerProperties
from ember.core.checkpointing.checkpoint import Checkpointing
from ember.core.errors import ConfigurationError, PluginError
from ember.core.hooks import discovery, options, tracing
from ember.core.hooks.config import TrainerConfig, make_config
from ember.core.hooks.defaults import Defaults
from ember.core.hooks.plugin_manager import EmberWarning, HookTable, PluginManager, guarded, marked_only
from ember.core.loop import data as loop_data
from ember.core.loop import module_overrides, seed
from ember.core.loop.loops import Loops
from ember.core.loop.optim import SchedulerConfig
from ember.core.loop.run_inputs import check_run_inputs, default_ckpt_path, looks_like_datamodule
from ember.core.loop.signals import SignalExit
from ember.core.loop.state import StateName, TrainerState

log = logging.getLogger("ember")

#: Roles selected by a Trainer argument: role -> the argument naming it. One plugin per role is active.
SELECTED_ROLES = ("accelerator", "strategy", "precision", "environment", "checkpoint_io")
#: Plugin identities that cannot be blocked.
ESSENTIAL = frozenset({"core.defaults"})
_STAGES = ("fit", "validate", "test", "predict")
#: The stage a run is in from its start (its setup included), as in Lightning.
_FIRST_STAGE = {"fit": "train", "validate": "validate", "test": "test", "predict": "predict"}


def _env_blocked() -> tuple[str, ...]:
    raw = os.environ.get(discovery.BLOCK_ENV, "")
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _autoload_env_off() -> bool:
    return _env_flag(discovery.AUTOLOAD_ENV)


def _identity_of(plugin: Any, default_role: str) -> str:
    identity = getattr(plugin, "identity", None)
    if isinstance(identity, str) and identity:
        return identity
    return f"{default_role}.{type(plugin).__name__}" if not isinstance(plugin, type) else f"{default_role}.{plugin.__name__}"


class Trainer(TrainerProperties):
    """Runs ``fit``, ``validate``, ``test`` and ``predict``; every step of the way is a hook.

    Arguments are Lightning's (see :class:`ember.core.hooks.config.TrainerConfig` for the full list), plus
    ``block_plugins`` (identities never registered), ``autoload_plugins`` (False: no always-on plugins),
    ``strict_plugins`` (True: an always-on plugin that cannot be loaded is an error, not a warning) and
    ``trace`` (write every hook call as a JSON line, see :mod:`ember.core.hooks.tracing`).
    """

    def __init__(self, **kwargs: Any) -> None:
        self.config: TrainerConfig = make_config(kwargs)
        self._arguments = dict(kwargs)  # as given: a spawning strategy builds the Trainer again from them
        self.plugin_manager = PluginManager()
        self.blocked = tuple(dict.fromkeys(self.config.block_plugins + _env_blocked()))
        self.discovery = discovery.discover().without_distributions(self.blocked)  # dist:NAME entries
        for problem in discovery.discover().unknown_blocked(self.blocked, tuple(ESSENTIAL)):
            warnings.warn(problem, EmberWarning, stacklevel=2)
        for identity in self.blocked:
            if identity in ESSENTIAL:
                raise PluginError(f"plugin {identity!r} is essential to ember and cannot be blocked; "
                                  f"remove it from block_plugins / {discovery.BLOCK_ENV}.")
            self.plugin_manager.set_blocked(identity)
        self.autoload = self.config.autoload_plugins and not _autoload_env_off()
        strict = self.config.strict_plugins
        self.strict_plugins: bool = _env_flag(discovery.STRICT_ENV) if strict is None else strict
        target = tracing.resolve_target(self.config.trace)
        self.tracer: tracing.HookTracer | None = tracing.HookTracer(target) if target is not None else None
        self.role_plugins: dict[str, Any] = {}
        self.role_identities: dict[str, str] = {}
        self.extra_plugins: list[tuple[str, Any]] = []
        self._select_plugins()
        self.autoload_plugins: list[tuple[str, Any]] = self._load_autoload() if self.autoload else []
        self._init_state()

    # -- plugin selection ----------------------------------------------------------------------------------
    def _select_plugins(self) -> None:
        cfg = self.config
        given: dict[str, Any] = {}
        for item in cfg.plugins:
            identity, plugin = self._named(item, "plugin") if isinstance(item, str) else (None, item)
            role = identity.split(".", 1)[0] if identity else getattr(plugin, "role", None)
            if role in SELECTED_ROLES:
                if role in given:
                    raise ConfigurationError(f"Trainer(plugins=...) holds two {role} plugins: {given[role]!r} and "
                                             f"{plugin!r}; pass one.")
                given[role] = plugin
            else:
                self.extra_plugins.append((identity or _identity_of(plugin, "plugin"), plugin))
        for item in cfg.callbacks:
            self.extra_plugins.append(self._named(item, "callback") if isinstance(item, str)
                                      else (_identity_of(item, "callback"), item))
        self.extra_plugins.extend(null_logger.for_run(self.config.fast_dev_run, self._select_loggers()))
        if self.config.profiler is not None:
            profiler = self.config.profiler
            self.extra_plugins.append(self._named(profiler, "profiler") if isinstance(profiler, str)
                                      else (_identity_of(profiler, "profiler"), profiler))
        self._add_flag_plugins()
        seen: set[str] = set()
        for i, (identity, plugin) in enumerate(self.extra_plugins):
            if identity in seen:  # two callbacks of one class: keep identities unique and stable
                n = 2
                while f"{identity}-{n}" in seen:
                    n += 1
                identity = f"{identity}-{n}"
                self.extra_plugins[i] = (identity, plugin)
            seen.add(identity)
        for role in SELECTED_ROLES:
            arg = getattr(cfg, role)
            if role in given:
                default = getattr(attrs.fields(TrainerConfig), role).default
                if arg not in (default, "auto"):
                    raise ConfigurationError(f"Trainer({role}={arg!r}) conflicts with the {role} plugin passed in "
                                             f"plugins=[{given[role]!r}]; pass one of them.")
                arg = given[role]
            self._select(role, arg)

    def _named(self, name: str, default_role: str, switched_on: bool = False) -> tuple[str, Any]:
        """Load the plugin ``name`` names: an identity (``"callback.early-stopping"``) or a bare name of
        ``default_role`` (``"csv"``); a default a Trainer argument ``switched_on`` is built by its options.substitute."""
        role = name.split(".", 1)[0] if "." in name and name.split(".", 1)[0] in self._roles() else default_role
        info = self.discovery.lookup(role, name)
        if info.identity in self.blocked:
            raise PluginError(f"plugin {info.identity!r} (from {info.dist}) is named in the Trainer arguments but "
                              f"blocked by block_plugins / {discovery.BLOCK_ENV}; unblock it or remove it.")
        substitute = options.substitute_for(info.identity) if switched_on else None
        plugin = info.load() if substitute is None else substitute()
        check = getattr(plugin, "check_available", None)
        if callable(check):
            check(self.config)
        self.plugin_manager.origins[info.identity] = info.dist
        return info.identity, plugin

    def _roles(self) -> set[str]:
        return {identity.split(".", 1)[0] for identity in self.discovery.plugins}

    def _select_loggers(self) -> list[tuple[str, Any]]:
        """``logger``: True (the default CSV logger), False/None (none), a name, an object, or a list of these.
        Unlike the accelerator, precision and strategy, several loggers can be active at once."""
        value = self.config.logger
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        out = []
        for item in items:
            if item is None or item is False:
                continue
            switched_on = item is True
            if switched_on:
                item = options.declarations().defaults.get("logger")  # the plugin that declared itself so
                if item is None or item in self.blocked:
                    continue
            out.append(self._named(item, "logger", switched_on) if isinstance(item, str)
                       else (_identity_of(item, "logger"), item))
        return out

    def _add_flag_plugins(self) -> None:
        """The plugins that one of their declared Trainer arguments switches on (progress bar, model summary,
        timer, ...: ``switches`` in :mod:`ember.core.hooks.options`), unless the user passed a plugin that takes
        their place."""
        for name, identity, replaced_by in options.declarations().switches:
            value = getattr(self.config, name)
            role = replaced_by[:-1] if replaced_by.endswith(".") else None
            passed = [(ident, p) for ident, p in self.extra_plugins
                      if ident.startswith(replaced_by) or (role and getattr(p, "role", None) == role)]
            options.check_switch(name, value, role, passed)
            if value is None or value is False or passed or identity in self.blocked:
                continue
            self.extra_plugins.append(self._named(identity, identity.split(".", 1)[0], switched_on=True))

    def _select(self, role: str, arg: Any) -> None:
        if not isinstance(arg, str):
            identity = _identity_of(arg, role)
            if identity in self.blocked:  # never registered: the run would silently fall back to the defaults
                raise PluginError(f"the {role} plugin {arg!r} ({identity}) is blocked by block_plugins / "
                                  f"{discovery.BLOCK_ENV}; unblock it or pass another {role}.")
            self._activate(role, identity, arg)
            return
        name = arg
        if name == "auto":
            name = self._auto(role)
        info = self.discovery.lookup(role, name)
        if info.identity in self.blocked:
            raise PluginError(f"{role} {name!r} ({info.identity}, from {info.dist}) is blocked by block_plugins / "
                              f"{discovery.BLOCK_ENV}; unblock it or choose another {role}: "
                              f"{', '.join(self.discovery.role_names(role))}.")
        self._activate(role, info.identity, info.load(), origin=info.dist)

    def _activate(self, role: str, identity: str, plugin: Any, origin: str | None = None) -> None:
        check = getattr(plugin, "check_available", None)
        if callable(check):
            check(self.config)  # raises ConfigurationError naming what is missing (e.g. no CUDA device)
        self.role_plugins[role], self.role_identities[role] = plugin, identity
        note_selected(plugin, self)  # trainer_of(plugin): how the plugin object answers code holding it
        if origin:
            self.plugin_manager.origins[identity] = origin

    def _auto(self, role: str) -> str:
        """``"auto"``: the available plugin of the role with the highest ``auto_select(config)`` priority."""
        best: tuple[float, str] | None = None
        for identity, infos in self.discovery.plugins.items():
            if not identity.startswith(role + ".") or identity in self.blocked:
                continue
            info = discovery.only(identity, infos)
            try:
                plugin = info.load()
            except PluginError as exc:
                log.warning("skipping %s for %s='auto': %s", identity, role, exc)
                continue
            chooser = getattr(plugin, "auto_select", None)
            priority = chooser(self.config) if callable(chooser) else None
            if priority is not None and (best is None or priority > best[0]):
                best = (priority, info.name)
        if best is None:
            raise PluginError(f"{role}='auto' found no available {role} plugin among "
                              f"{', '.join(self.discovery.role_names(role)) or '(none installed)'}.")
        return best[1]

    def _load_autoload(self) -> list[tuple[str, Any]]:
        """Load the always-on plugins, in identity order.

        One that cannot be used (import error, invalid hook implementation, identity claimed twice, invalid
        identity) is skipped with an :class:`EmberWarning` naming it, its distribution, what failed and how to
        switch it off; with ``strict_plugins`` (or ``EMBER_STRICT_PLUGINS=1``) it is an error instead. A plugin
        the user did not ask for should not stop a run; one they rely on can be made to."""
        problems: list[str] = list(self.discovery.invalid_autoload)
        if problems and self.strict_plugins:
            raise PluginError(problems[0])
        loaded = []
        pm = self.plugin_manager
        given = {identity for identity, _ in self.extra_plugins}
        for identity, infos in self.discovery.autoload.items():
            if identity in self.blocked or identity in given:  # an instance passed explicitly replaces it
                continue
            try:
                info = discovery.only(identity, infos)
                plugin = info.load()
                # Validate the hook implementations now, not at the first fit.
                pm.register(plugin, name=identity, origin=info.dist)
                pm.unregister(plugin)
            except PluginError as exc:
                if self.strict_plugins:
                    raise
                problems.append(str(exc))
                continue
            pm.origins[identity] = info.dist
            loaded.append((identity, plugin))
        for problem in problems:
            warnings.warn(f"{problem} This always-on plugin is skipped; pass Trainer(strict_plugins=True) or set "
                          f"{discovery.STRICT_ENV}=1 to make this an error.", EmberWarning, stacklevel=3)
        return loaded

    # -- state ---------------------------------------------------------------------------------------------
    def _init_state(self) -> None:
        self.state = TrainerState()
        self.module: Any = None
        self.model: Any = None
        self.datamodule: Any = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_scheduler_configs: list[SchedulerConfig] = []
        self.hook = HookTable(self.plugin_manager)  # replaced by a fresh table at each run (see _run)
        self.global_rank = self.local_rank = self.node_rank = 0
        self.world_size = 1
        self.root_device: torch.device = planned_root_device(self)
        self.num_training_batches: float = math.inf
        self.num_val_batches: list[float] = []
        self.num_sanity_val_batches: list[float] = []
        self.num_test_batches: list[float] = []
        self.num_predict_batches: list[float] = []
        self.interrupted = False
        #: The loops, and the run state they own (progress counters, logging context, metrics).
        self.loop = Loops(self)
        #: Building, writing and restoring checkpoints; stopping on a signal.
        self.checkpointing = Checkpointing(self)
        #: The checkpoint the last run restored from (None when it started fresh).
        self.ckpt_path: str | None = None

    # -- public entry points -------------------------------------------------------------------------------
    def fit(self, model: torch.nn.Module, train_dataloaders: Any = None, val_dataloaders: Any = None,
            datamodule: Any = None, ckpt_path: str | None = None, weights_only: bool = True) -> None:
        """Train ``model``; data from the arguments, the DataModule or the module's ``*_dataloader()``.

        ``ckpt_path`` resumes from a checkpoint (a path, or ``"last"``); ``weights_only=False`` allows a
        checkpoint holding arbitrary Python objects (only for files you trust: loading them runs code).
        """
        if train_dataloaders is not None and looks_like_datamodule(train_dataloaders):
            datamodule, train_dataloaders = train_dataloaders, None
        self._run("fit", model, datamodule, {"train": train_dataloaders, "validate": val_dataloaders},
                  ckpt_path=ckpt_path, weights_only=weights_only)

    def validate(self, model: torch.nn.Module | None = None, dataloaders: Any = None, datamodule: Any = None,
                 ckpt_path: str | None = None, verbose: bool = True, weights_only: bool = True) -> list[dict[str, float]]:
        """Run one validation epoch; returns one dict of epoch metrics per loader. ``ckpt_path`` (also of ``test``,
        ``predict``): a file, "best", "last", "current" or None (docs/checkpoints.md, "Evaluation needs weights")."""
        return self._eval_entry("validate", model, dataloaders, datamodule, ckpt_path, verbose, weights_only)

    def test(self, model: torch.nn.Module | None = None, dataloaders: Any = None, datamodule: Any = None,
             ckpt_path: str | None = None, verbose: bool = True, weights_only: bool = True) -> list[dict[str, float]]:
        """Run one test epoch; returns one dict of epoch metrics per loader."""
        return self._eval_entry("test", model, dataloaders, datamodule, ckpt_path, verbose, weights_only)

    def predict(self, model: torch.nn.Module | None = None, dataloaders: Any = None, datamodule: Any = None,
                return_predictions: bool | None = None, ckpt_path: str | None = None, weights_only: bool = True) -> Any:
        """Run ``predict_step`` over the data; returns the outputs (a list per loader when several), unless
        ``return_predictions`` is False (None: True, but False under strategy="ddp_spawn", which keeps them)."""
        if dataloaders is not None and looks_like_datamodule(dataloaders):
            datamodule, dataloaders = dataloaders, None
        return self._run("predict", model, datamodule, {"predict": dataloaders},
                         ckpt_path=default_ckpt_path(self, model, ckpt_path, "predict"), return_predictions=return_predictions, weights_only=weights_only)

    def _eval_entry(self, stage: str, model: Any, dataloaders: Any, datamodule: Any, ckpt_path: Any,
                    verbose: bool, weights_only: bool = True) -> list[dict[str, float]]:
        if dataloaders is not None and looks_like_datamodule(dataloaders):
            datamodule, dataloaders = dataloaders, None
        return self._run(stage, model, datamodule, {stage: dataloaders},
                         ckpt_path=default_ckpt_path(self, model, ckpt_path, stage), verbose=verbose, weights_only=weights_only)

    # -- checkpoints ---------------------------------------------------------------------------------------
    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool = False) -> None:
        """Write a checkpoint of the current state to ``filepath`` (atomically, through the checkpoint-storage
        plugin). ``weights_only=True`` writes the module's weights and hyperparameters only: enough for
        ``Module.load_from_checkpoint``, not for resuming. See docs/checkpoints.md."""
        self.checkpointing.save(filepath, weights_only)

    def remove_checkpoint(self, filepath: str | os.PathLike) -> None:
        """Delete a checkpoint written by :meth:`save_checkpoint` (through the checkpoint-storage plugin)."""
        self.checkpointing.remove(filepath)

    # -- one run -------------------------------------------------------------------------------------------
    def _run(self, fn: str, model: Any, datamodule: Any, loaders: dict[str, Any], **options: Any) -> Any:
        model = check_run_inputs(fn, model, self.module, datamodule, loaders)
        options["ckpt_path"] = self.checkpointing.ckpt_path_for(fn, model, options.get("ckpt_path"))
        self.module, self.datamodule = model, datamodule
        self.state = TrainerState(fn=fn, stage=_FIRST_STAGE[fn], status="running")
        self.interrupted = False
        pm = self.plugin_manager
        if "_trainer" in getattr(model, "__dict__", {}) or isinstance(model, _module_base()):
            model.__dict__["_trainer"] = self  # before configure_callbacks, as in Lightning
        module_overrides.attach_callbacks(self, model, _identity_of)  # the module's configure_callbacks()
        registered = self.register_run_plugins(model, datamodule)
        if self.tracer is not None:
            self.tracer.start(self, fn)
        self.hook = HookTable(pm)
        if datamodule is not None:
            datamodule.__dict__["trainer"] = self
        failed, grad_enabled = False, torch.is_grad_enabled()
        try:
            with logging_api.running(self):
                return self.loop.run(fn, loaders, options)
        except BaseException as exc:
            try:  # first: torch raises again from SIGCHLD until a dead DataLoader worker's iterator is shut down
                loop_data.note_dead_worker(self, exc)
            except RuntimeError:  # raised again before the shutdown: once more, now that no signal is pending
                loop_data.note_dead_worker(self, exc)
            failed = True
            if isinstance(exc, SystemExit) and self.state.status == "launched":
                raise
            interrupted = isinstance(exc, (KeyboardInterrupt, SignalExit))
            self.state.status = "interrupted" if interrupted else "failed"
            self.interrupted = interrupted
            self._name_plugin_in(exc)
            self._on_exception(exc)
            if isinstance(exc, KeyboardInterrupt):  # one meaning: re-raised, the module keeps its weights
                log.warning("KeyboardInterrupt: run stopped at epoch %d, step %d", self.current_epoch,
                            self.global_step)
            raise
        finally:
            try:
                if self.hook.teardown is not None and self.state.setup_done:
                    if failed:  # as in Lightning: no callback or module teardown after an exception; plugins
                        # marked @hookimpl still release what they hold (process groups, threads, files)
                        self.hook.call_each("teardown", marked_only, trainer=self, module=model, stage=StateName(fn))
                    else:
                        self.hook.teardown(trainer=self, module=model, stage=StateName(fn))
            finally:  # an exception raised asynchronously (a signal) may skip a no_grad block's own restore
                seed.restore_deterministic(self)
                torch.set_grad_enabled(grad_enabled)
                if self.tracer is not None:
                    self.tracer.stop()
                for plugin in reversed(registered):
                    if pm.is_registered(plugin):
                        pm.unregister(plugin)
                self.state.stage = None
                if self.state.status == "running":
                    self.state.status = "finished"

    def register_run_plugins(self, model: Any, datamodule: Any) -> list[Any]:
        """Register this run's plugins.

        pluggy calls implementations LIFO (the last registered runs first, and its wrapper is outermost), so
        the order below is the reverse of the call order: callbacks and plugins in the order given, then the
        always-on plugins by identity, then the module, the DataModule, the role plugins and core.defaults.
        ``tryfirst``/``trylast`` move an implementation within that order. Installation order never matters.
        """
        pm = self.plugin_manager
        order: list[tuple[str, Any, dict]] = [(Defaults.identity, Defaults(), {})]
        for role in SELECTED_ROLES:
            order.append((self.role_identities[role], self.role_plugins[role], {}))
        order.extend(module_overrides.data_plugins(model, datamodule))  # which of them transfers batches
        order.extend(module_overrides.role_answers(self, model))  # its transfer_batch_to_device, backward, ...
        order.extend((ident, p, {}) for ident, p in reversed(self.autoload_plugins))
        order.extend((ident, p, {}) for ident, p in reversed(self.extra_plugins))
        registered = []
        try:
            for identity, plugin, extra in order:
                if identity in self.blocked:
                    continue
                if pm.is_registered(plugin):
                    continue
                pm.register(plugin, name=identity, origin=pm.origins.get(identity), **extra)
                registered.append(plugin)
        except BaseException:
            for plugin in reversed(registered):
                pm.unregister(plugin)
            raise
        return registered

    def _on_exception(self, exc: BaseException) -> None:
        """Run every ``on_exception`` implementation, even when one of them raises.

        The call goes through the hook table like every other (so tracing sees it and wrappers wrap it), with
        each plain implementation guarded so that one failing handler cannot hide the others or the original
        error.
        """
        try:
            self.hook.call_each("on_exception", functools.partial(guarded, exc=exc), trainer=self,
                                module=self.module, exception=exc)
        except Exception:
            log.exception("an on_exception wrapper raised while handling %r", exc)

    def _name_plugin_in(self, exc: BaseException) -> None:
        """Add a note to an exception raised inside an installed plugin: which one, and how to switch it off."""
        pm = self.plugin_manager
        name = pm.plugin_of_traceback(exc)
        origin = pm.origins.get(name) if name else None
        if name is None or origin is None or origin.startswith("ember ") or not hasattr(exc, "add_note"):
            return
        dist = origin.rsplit(" ", 1)[0]
        exc.add_note(f"Raised inside the plugin {name!r} from {origin}. {discovery.switch_off_hint(name, dist)}")

    # -- for plugins and users -------------------------------------------------------------------------
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean", sync_dist: bool = False,
            batch_size: int | None = None) -> None:
        """Record a metric from a plugin or callback; the same options and defaults as ``module.log``."""
        self.loop.metrics.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                              reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Agree on a decision across processes: every rank's (``all=True``) or any rank's. A collective."""
        return bool(self.hook.call("reduce_boolean_decision", trainer=self, decision=decision, all=all))

    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor:
        return self.hook.call("reduce", trainer=self, tensor=tensor, op=op)

    def barrier(self, name: str | None = None) -> None:
        self.hook.call("barrier", trainer=self, name=name)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self.hook.call("broadcast", trainer=self, obj=obj, src=src)

    def all_gather(self, tensor: torch.Tensor, sync_grads: bool = False) -> torch.Tensor:
        return self.hook.call("all_gather", trainer=self, tensor=tensor, sync_grads=sync_grads)

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.is_global_zero:
            print(*args, **kwargs)


def _module_base() -> type:
    from ember.core.api.module import Module

    return Module


if TYPE_CHECKING:
    from ember.hookspecs.trainer import TrainerLike

    def _satisfies_the_plugin_contract(trainer: Trainer) -> TrainerLike:
        return trainer  # mypy checks that Trainer has every member of TrainerLike, with compatible types
