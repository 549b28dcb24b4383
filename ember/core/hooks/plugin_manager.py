"""The plugin manager: a thin pluggy subclass, one per Trainer, and the per-run hook table."""

from __future__ import annotations

import functools
import inspect
import logging
import types
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pluggy

from ember.core.errors import EmberWarning, PluginError, suggest
from ember.core.hooks.class_hooks import (
    EVENT_HOOKS,
    FULL,
    IMPL_MARK,
    MARKED,
    NONE,
    NOT_CALLED,
    PLAIN,
    ClassHooks,
    class_hooks,
    implemented_hooks,
    may_be_marked,
    misspelled_hooks,
)
from ember.core.hooks.discovery import switch_off_hint
from ember.core.hooks.dispatch import NOOP_MARK, HookTable, Monitor, compile_call, noop_fallback
from ember.core.hooks.positional import (
    index_when_several,
    is_base_hook,
    positional_argnames,
    same_call,
    spec_named,
    style_of,
)
from ember.hookspecs import PROJECT, spec_modules

log = logging.getLogger("ember")


#: Hooks where the DataModule's implementation runs first (Lightning calls the DataModule first there).
_DATAMODULE_FIRST = frozenset({"prepare_data", "setup", "teardown"})


__all__ = ["EVENT_HOOKS", "NOOP_MARK", "NOT_CALLED", "EmberWarning", "HookTable", "PluginManager", "compile_call",
           "implemented_hooks", "misspelled_hooks", "noop_fallback"]


_ABSENT = object()


def _extends_a_plugin(cls: type) -> bool:
    """Whether a base class of ``cls`` marks a method as a hook implementation (a plugin class, subclassed)."""
    return any(isinstance(getattr(getattr(attr, "__func__", attr), f"{PROJECT}_impl", None), dict)
               for base in cls.__mro__[1:] for attr in vars(base).values())


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with ember's rules.

    * Methods named like an event hook are implementations without a marker (Lightning's convention), so an
      ``nn.Module`` or a Lightning-style callback takes part as it is. Role and configuration hooks need
      ``@ember.hookimpl``.
    * A marked implementation of an unknown hook, or one asking for an argument its spec lacks, fails at
      registration with the plugin's identity and the closest hook name.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT)
        for module in spec_modules():
            self.add_hookspecs(module)
        self._datamodules: set[int] = set()
        self._listeners: list[weakref.WeakMethod] = []
        self.origins: dict[str, str] = {}
        self._monitors: list[Monitor] = []
        #: (hook name, the instance attribute it replaced) for each method of the plugin being registered that stands
        #: in its ``__dict__`` while pluggy's register() reads it: a spec-named copy (see ember.core.hooks.positional), or
        #: the bound method itself, which pluggy then takes without looking it up again (see _place).
        self._placed: list[tuple[str, Any]] | None = None
        self._style: str | None = None
        #: While register() runs for an instance: what its class holds (see ClassHooks), its own __dict__, and
        #: the hook names parse_hookimpl_opts answered for (kept per plugin name for get_hookcallers).
        self._scan: ClassHooks | None = None
        self._own: dict[str, Any] = _NO_DICT
        self._parsed: list[str] | None = None
        #: The attribute names answered in the register() call under way (each once).
        self._answered: set[str] | None = None
        self._hook_names: dict[str, frozenset[str]] = {}
        self._known: frozenset[str] | None = None
        self._hook_order: dict[str, int] = {}

    def __reduce__(self) -> tuple[Any, tuple[list[str], dict[str, str]]]:
        """Pickled between runs (``pickle.dumps(trainer)``, as Lightning's Trainer pickles) as what it keeps then:
        the blocked identities and the plugins' origins; a run's plugins are registered again by the next run."""
        registered = [name for name, plugin in self._name2plugin.items() if plugin is not None]
        if registered:
            raise TypeError(f"a Trainer cannot be pickled while a run holds its plugins ({', '.join(registered)}): "
                            "pickle it before or after fit/validate/test/predict.")
        blocked = [name for name, plugin in self._name2plugin.items() if plugin is None]
        return _manager_from, (blocked, dict(self.origins))

    # -- discovery of implementations ------------------------------------------------------------------
    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        answered = self._answered
        if answered is not None:
            if name in answered:  # nn.Module's dir() lists an instance attribute twice when its class has the name
                return None
            answered.add(name)
        scan = self._scan
        if scan is not None:  # registering an instance: its class was read once (most attributes are no hooks)
            if name in self._own:
                if not callable(self._own[name]):
                    return None
            else:
                kind = scan.kinds.get(name, FULL)
                if kind is NONE:
                    return None
                if kind is PLAIN:
                    return self._found(name, self._place(plugin, name, scan, self._plain_opts(plugin, name)))
                if kind is MARKED:
                    opts = self._datamodule_first(plugin, name, scan.marked[name][1])
                    return self._found(name, self._place(plugin, name, scan, opts))
        elif name not in EVENT_HOOKS and not may_be_marked(plugin, name):
            return None  # most attributes (an nn.Module has hundreds): rejected without inspect.getattr_static
        return self._found(name, self._full_opts(plugin, name))

    def _place(self, plugin: Any, name: str, scan: ClassHooks, opts: Any) -> Any:
        """Put the bound method ``name`` of the class function found by the scan in the plugin's ``__dict__`` until
        register() ends: pluggy takes an instance attribute as it is, without inspect.getattr_static (twice per
        implementation otherwise), and binds the class's function to the same method."""
        own = self._own
        if own is not _NO_DICT and name not in own and self._placed is not None:  # else a spec-named copy is there
            self._placed.append((name, _ABSENT))
            own[name] = scan.functions[name].__get__(plugin, type(plugin))
        return opts

    def _found(self, name: str, opts: Any) -> Any:
        """``opts``, with the hook it implements noted for get_hookcallers."""
        if opts is not None and self._parsed is not None:
            self._parsed.append(opts.get("specname") or name)
        return opts

    def _datamodule_first(self, plugin: Any, name: str, opts: Any) -> Any:
        if id(plugin) in self._datamodules and name in _DATAMODULE_FIRST:
            return dict(opts, tryfirst=True)
        return opts

    def _full_opts(self, plugin: Any, name: str) -> Any:
        opts: Any = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name in EVENT_HOOKS:
            try:
                attr = inspect.getattr_static(plugin, name)
            except AttributeError:
                return None
            if is_base_hook(attr) and inspect.isroutine(attr):
                return None  # a base class's no-op (ember.Module, ember.Callback): nothing to call
            if callable(attr) or isinstance(attr, (staticmethod, classmethod)):
                # a method, or any callable set on the object (a functools.partial wrapping a hook, say)
                return self._plain_opts(plugin, name)
        return None if opts is None else self._datamodule_first(plugin, name, opts)

    def _plain_opts(self, plugin: Any, name: str) -> dict:
        """The options of a method named like an event hook that carries no marker."""
        opts = {"wrapper": False, "hookwrapper": False, "optionalhook": False,
                "tryfirst": False, "trylast": False, "specname": None}
        if self._placed is not None:
            if self._style is not None:
                opts = self._take_by_position(plugin, name, opts, self._style)
            elif self._asks_for_more(plugin, name) and _extends_a_plugin(type(plugin)):
                # A subclass of a plugin class (a built-in callback such as ModelCheckpoint) with a hook in
                # Lightning's style, (trainer, pl_module): taken by position, as a Callback's method would be.
                opts = self._take_by_position(plugin, name, opts, "callback")
            self._bind_callable_object(plugin, name)
        return self._datamodule_first(plugin, name, opts)

    def _bind_callable_object(self, plugin: Any, name: str) -> None:
        """A callable object set on the plugin under a hook's name (a ``functools.partial``), which pluggy only
        takes as a function: a function calling it, with its parameter names, in the plugin's ``__dict__`` until
        register() ends."""
        own = getattr(plugin, "__dict__", None)
        value = own.get(name) if isinstance(own, dict) else None
        if value is None or isinstance(value, (types.FunctionType, types.MethodType)) or not callable(value):
            return
        try:
            params = inspect.signature(value).parameters.values()
        except (TypeError, ValueError):
            params = ()  # type: ignore[assignment]
        names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        assert self._placed is not None and isinstance(own, dict)
        self._placed.append((name, value))
        own[name] = spec_named(value, names, name)

    def _asks_for_more(self, plugin: Any, name: str) -> bool:
        spec = getattr(getattr(self.hook, name, None), "spec", None)
        if spec is None:
            return False
        try:
            params = inspect.signature(getattr(plugin, name)).parameters.values()
        except (TypeError, ValueError):
            return False
        # (``def on_validation_batch_end(self, *args)``: Lightning's style, the arguments by position)
        return any(p.kind is p.VAR_POSITIONAL or p.name not in spec.argnames for p in params
                   if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) and p.default is p.empty)

    def _take_by_position(self, plugin: Any, name: str, opts: dict, style: str) -> dict:
        """A Lightning-style method whose parameter names do not match the spec: its spec-named copy is put in the
        plugin's ``__dict__``, where pluggy's register() reads it next (see ember.core.hooks.positional)."""
        caller = getattr(self.hook, name, None)
        spec = getattr(caller, "spec", None)
        if spec is None:
            return opts
        function = getattr(plugin, name)
        try:
            argnames = positional_argnames(function, spec.argnames, style, f"{type(plugin).__name__}.{name}")
        except TypeError as exc:
            raise PluginError(f"{exc} Lightning-style hooks receive the hook's arguments by position; "
                              "`ember hooks` lists every hook and its arguments.") from None
        if argnames is None:
            return opts
        function, argnames = index_when_several(function, argnames, name)
        named = spec_named(function, argnames, name)
        if named is None or not isinstance(getattr(plugin, "__dict__", None), dict):
            raise PluginError(f"{type(plugin).__name__}.{name} takes its arguments by position, which needs a "
                              "method defined with def on an object that has a __dict__; name its parameters like "
                              "the hook's (`ember hooks` lists them) instead.")
        assert self._placed is not None
        self._placed.append((name, plugin.__dict__.get(name, _ABSENT)))
        plugin.__dict__[name] = named  # read by pluggy's register() right after this returns; removed after it
        return opts

    def register(self, plugin: Any, name: str | None = None, *, origin: str | None = None,
                 datamodule: bool = False, without: frozenset[str] = frozenset()) -> str | None:
        """Register ``plugin`` under its identity ``name``; ``origin`` names where it came from in errors. The
        event hooks named in ``without`` are left out (another plugin answers them for this run)."""
        label = name or type(plugin).__name__
        cls = type(plugin).__name__  # names a user's object (the module) whose identity does not say what it is
        where = f"plugin {label!r}" + (f" (from {origin})" if origin else f" ({cls})" if cls not in label else "")
        # A plugin that came from an installed distribution can be switched off without touching code.
        hint = " " + switch_off_hint(label, origin.rsplit(" ", 1)[0]) if origin and name else ""
        if datamodule:
            self._datamodules.add(id(plugin))
        self._style = style_of(plugin, name)
        self._placed = []
        self._answered = set(without)
        try:
            try:
                scan = self._start_parsing(plugin)
                registered = super().register(plugin, name)
                parsed = self._parsed
            finally:
                self._scan, self._own, self._parsed, self._answered = None, _NO_DICT, None, None
        except pluggy.PluginValidationError as exc:
            self._datamodules.discard(id(plugin))
            raise PluginError(f"{where} has an invalid hook implementation: {self._explain(plugin) or exc} "
                              "An implementation may take any subset of the spec's arguments, by name; "
                              f"`ember hooks` lists every hook and its arguments.{hint}") from exc
        except ValueError as exc:
            raise PluginError(f"{where} cannot be registered: {exc}{hint}") from exc
        except PluginError:
            self._datamodules.discard(id(plugin))
            raise
        finally:
            for hook_name, before in reversed(self._placed or ()):
                if before is _ABSENT:
                    plugin.__dict__.pop(hook_name, None)
                else:
                    plugin.__dict__[hook_name] = before
            self._placed = self._style = None
        if registered is None:
            return None
        if parsed is not None:
            self._hook_names[registered] = frozenset(parsed)
        else:
            self._hook_names.pop(registered, None)
        if origin:
            self.origins[registered] = origin
        try:
            self._check_names(plugin, registered, scan, where, hint)
        except Exception:
            self.unregister(plugin)
            raise
        self._changed()
        return registered

    def _start_parsing(self, plugin: Any) -> ClassHooks:
        """Get ready for pluggy's register() to ask parse_hookimpl_opts about each attribute of ``plugin``;
        returns what its class holds."""
        # A subclass that parses differently would make the recorded hook names wrong: it keeps pluggy's scan.
        self._parsed = [] if type(self).parse_hookimpl_opts is PluginManager.parse_hookimpl_opts else None
        scan = class_hooks(type(plugin))
        if isinstance(plugin, (type, types.ModuleType)):
            return scan  # its attributes are not its class's
        self._scan = scan
        try:
            own = object.__getattribute__(plugin, "__dict__")
        except AttributeError:
            own = _NO_DICT
        self._own = own if isinstance(own, dict) else _NO_DICT
        return scan

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        if name is None and plugin is not None:
            name = self.get_name(plugin)
        result = super().unregister(plugin, name)
        self._datamodules.discard(id(result))
        if name is not None:
            self._hook_names.pop(name, None)
        self._changed()
        return result

    def get_hookcallers(self, plugin: Any) -> list[pluggy.HookCaller] | None:
        name = self.get_name(plugin)
        names = self._hook_names.get(name) if name is not None else None
        if names is None:
            return super().get_hookcallers(plugin)
        # Only the hooks its registration answered for can hold it: pluggy's own scan asks every hook.
        hooks = vars(self.hook)
        found = [hooks[n] for n in names if n in hooks and any(i.plugin is plugin for i in hooks[n].get_hookimpls())]
        order = self._hook_order
        if len(order) != len(hooks) or not all(caller.name in order for caller in found):  # a hook was added
            order = self._hook_order = {n: i for i, n in enumerate(hooks)}
        return sorted(found, key=lambda caller: order[caller.name])  # in pluggy's order

    def add_hookspecs(self, module_or_class: Any) -> None:
        super().add_hookspecs(module_or_class)
        self._known = None

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> Any:
        # A spec module's names are read from its __dict__, as pluggy's static lookup finds them there, without
        # inspect.getattr_static for each of them (every Trainer reads ember's spec modules).
        if isinstance(module_or_class, types.ModuleType) and name not in _MODULE_TYPE_NAMES:
            value = vars(module_or_class).get(name, _MISSING)
            if isinstance(value, types.FunctionType):
                opts = getattr(value, _SPEC_MARK, None)
                return opts if isinstance(opts, dict) else None
            if value is not _MISSING and not isinstance(value, (staticmethod, classmethod, types.MethodType)):
                return None
        return super().parse_hookspec_opts(module_or_class, name)

    def _explain(self, plugin: Any) -> str:
        """Which implementation asks for which arguments its spec lacks (for the registration error)."""
        for attr in dir(plugin):
            opts = self.parse_hookimpl_opts(plugin, attr)
            if opts is None:
                continue
            hook_name = opts.get("specname") or attr
            caller = getattr(self.hook, hook_name, None)
            if caller is None or caller.spec is None:
                continue
            impl = pluggy.HookImpl(plugin, hook_name, getattr(plugin, attr), opts)
            extra = [a for a in impl.argnames if a not in caller.spec.argnames]
            if extra:
                hint = (" Lightning's 'pl_module' is called 'module' in ember." if "pl_module" in extra else "")
                return (f"{attr}() asks for {', '.join(repr(a) for a in extra)}, which {hook_name!r} does not "
                        f"pass; it passes {', '.join(caller.spec.argnames)}.{hint}")
        return ""

    def _check_names(self, plugin: Any, registered: str, scan: ClassHooks, where: str, hint: str = "") -> None:
        if self._known is None:  # the specs change only through add_hookspecs, which forgets this
            self._known = frozenset(name for name, caller in vars(self.hook).items()
                                    if getattr(caller, "spec", None) is not None)
        known = self._known
        implemented = self._hook_names.get(registered)
        unknown = implemented is None or implemented - known  # else every hook it implements has a spec
        for caller in (self.get_hookcallers(plugin) or ()) if unknown else ():
            if caller.spec is None:
                impl = next(i for i in caller.get_hookimpls() if i.plugin is plugin)
                if impl.optionalhook:
                    continue
                raise PluginError(f"{where} implements {caller.name!r}, which is not an ember hook."
                                  f"{suggest(caller.name, known)} `ember hooks` lists them.{hint}")
        for attr in scan.not_called:
            if not is_base_hook(inspect.getattr_static(plugin, attr, None)):
                warnings.warn(f"{where} overrides {attr!r}, which ember never calls (it has no such point in its "
                              "loop); move that code to another hook.", EmberWarning, stacklevel=4)
        for attr, close in scan.misspelled:
            if attr not in known:
                warnings.warn(f"{where} defines {attr!r}, which is not an ember hook and will never be "
                              f"called.{close}", EmberWarning, stacklevel=4)

    def plugin_of_traceback(self, exc: BaseException) -> str | None:
        """The name of the registered plugin whose method raised ``exc`` (innermost frame), or None."""
        owners = {id(p): n for n, p in self.list_name_plugin() if n is not None}
        # a plugin that is a module (or a wrapper function) has no ``self``: know its implementations' code
        codes = {id(getattr(impl.function, "__code__", None)): impl.plugin_name
                 for caller in vars(self.hook).values() if isinstance(caller, pluggy.HookCaller)
                 for impl in caller.get_hookimpls()}
        found = None
        tb = exc.__traceback__
        while tb is not None:
            owner = tb.tb_frame.f_locals.get("self")
            if owner is not None and id(owner) in owners:
                found = owners[id(owner)]
            elif id(tb.tb_frame.f_code) in codes:
                found = codes[id(tb.tb_frame.f_code)]
            tb = tb.tb_next
        return found

    # -- the per-run hook table ------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call the bound method ``listener`` whenever the plugins change, for as long as its object lives
        (a Trainer makes a hook table per run; the tables of finished runs are dropped, not rebuilt)."""
        self._listeners.append(weakref.WeakMethod(listener))  # type: ignore[arg-type]

    def _changed(self) -> None:
        alive = []
        for ref in self._listeners:
            listener = ref()
            if listener is not None:
                alive.append(ref)
                listener()
        self._listeners = alive

    @property
    def monitored(self) -> bool:
        """True while a hook-call monitor (tracing, a profiler, a recorder) is on."""
        return bool(self._monitors)

    @property
    def monitors(self) -> tuple[Monitor, ...]:
        """The hook-call monitors on now, first added first: the hook table calls them around every hook."""
        return tuple(self._monitors)

    def add_hookcall_monitoring(self, before: Any, after: Any) -> Callable[[], None]:
        """pluggy's hook-call monitoring, for the calls ember makes (through the hook table) and for direct
        ``pm.hook.<name>(...)`` calls alike. Returns the function that removes the monitor."""
        undo = super().add_hookcall_monitoring(before, after)
        pair = (before, after)
        self._monitors.append(pair)
        self._changed()

        def undo_and_rebuild() -> None:
            undo()
            if pair in self._monitors:
                self._monitors.remove(pair)
            self._changed()

        return undo_and_rebuild


#: The empty ``__dict__`` of a plugin that has none (slots): nothing is placed in it.
_NO_DICT: dict[str, Any] = {}
_SPEC_MARK = PROJECT + "_spec"
#: Names the module type itself defines (``__dict__``, ``__class__``, ...): a module's own entry may not be what a
#: static lookup finds for them.
_MODULE_TYPE_NAMES = frozenset(dir(types.ModuleType))
_MISSING = object()


def guarded(impl: pluggy.HookImpl, exc: BaseException) -> pluggy.HookImpl:
    """A copy of a plain ``impl`` whose exceptions are logged instead of raised (wrappers are kept as they are)."""
    if impl.wrapper or impl.hookwrapper:
        return impl
    function = impl.function

    @functools.wraps(function)  # pluggy reads the arguments to pass through __wrapped__
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception:
            log.exception("on_exception of %s raised while handling %r", impl.plugin_name, exc)
            return None

    return same_call(impl, call)


def marked_only(impl: pluggy.HookImpl) -> pluggy.HookImpl:
    """``impl`` when it is marked ``@ember.hookimpl``; else a copy that does nothing (a Lightning-style method)."""
    function = impl.function
    if impl.wrapper or impl.hookwrapper or getattr(function, IMPL_MARK, None) is not None:
        return impl

    @functools.wraps(function)  # pluggy reads the arguments to pass through __wrapped__
    def skipped(*args: Any, **kwargs: Any) -> None:
        return None

    return same_call(impl, skipped)


def _manager_from(blocked: list[str], origins: dict[str, str]) -> PluginManager:
    pm = PluginManager()
    for name in blocked:
        pm.set_blocked(name)
    pm.origins.update(origins)
    return pm
