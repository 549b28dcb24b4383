"""The plugin manager: a thin pluggy subclass, one per Trainer, and the per-run hook table."""

from __future__ import annotations

import inspect
import types
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pluggy

from ember.core.discovery import switch_off_hint
from ember.core.errors import PluginError, suggest
from ember.hookspecs import PROJECT, spec_modules
from ember.hookspecs import events as _events


def _spec_names(module: Any) -> frozenset[str]:
    return frozenset(
        name for name, fn in vars(module).items() if callable(fn) and hasattr(fn, PROJECT + "_spec")
    )


#: Hooks that a plain method with the hook's name implements (Lightning's callback/module convention).
EVENT_HOOKS = _spec_names(_events)
#: Hooks where the DataModule's implementation runs first (Lightning calls the DataModule first there).
_DATAMODULE_FIRST = frozenset({"prepare_data", "setup", "teardown"})


class EmberWarning(UserWarning):
    """A likely mistake that does not stop the run."""


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
        self._plain_hookexec = self._inner_hookexec

    # -- discovery of implementations ------------------------------------------------------------------
    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if name not in EVENT_HOOKS and not _may_be_marked(plugin, name):
            return None  # most attributes (an nn.Module has hundreds): rejected without inspect.getattr_static
        opts: Any = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name in EVENT_HOOKS:
            try:
                attr = inspect.getattr_static(plugin, name)
            except AttributeError:
                return None
            if inspect.isroutine(attr) or isinstance(attr, (staticmethod, classmethod)):
                opts = {"wrapper": False, "hookwrapper": False, "optionalhook": False,
                        "tryfirst": False, "trylast": False, "specname": None}
        if opts is not None and id(plugin) in self._datamodules and name in _DATAMODULE_FIRST:
            opts = dict(opts, tryfirst=True)
        return opts

    def register(self, plugin: Any, name: str | None = None, *, origin: str | None = None,
                 datamodule: bool = False) -> str | None:
        """Register ``plugin`` under its identity ``name``; ``origin`` names where it came from in errors."""
        label = name or type(plugin).__name__
        cls = type(plugin).__name__  # names a user's object (the module) whose identity does not say what it is
        where = f"plugin {label!r}" + (f" (from {origin})" if origin else f" ({cls})" if cls not in label else "")
        # A plugin that came from an installed distribution can be switched off without touching code.
        hint = " " + switch_off_hint(label, origin.rsplit(" ", 1)[0]) if origin and name else ""
        if datamodule:
            self._datamodules.add(id(plugin))
        try:
            registered = super().register(plugin, name)
        except pluggy.PluginValidationError as exc:
            self._datamodules.discard(id(plugin))
            raise PluginError(f"{where} has an invalid hook implementation: {self._explain(plugin) or exc} "
                              "An implementation may take any subset of the spec's arguments, by name; "
                              f"`ember hooks` lists every hook and its arguments.{hint}") from exc
        except ValueError as exc:
            raise PluginError(f"{where} cannot be registered: {exc}{hint}") from exc
        if registered is None:
            return None
        if origin:
            self.origins[registered] = origin
        try:
            self._check_names(plugin, where, hint)
        except Exception:
            self.unregister(plugin)
            raise
        self._changed()
        return registered

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        result = super().unregister(plugin, name)
        self._datamodules.discard(id(result))
        self._changed()
        return result

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

    def _check_names(self, plugin: Any, where: str, hint: str = "") -> None:
        known = {name for name, caller in vars(self.hook).items() if getattr(caller, "spec", None) is not None}
        for caller in self.get_hookcallers(plugin) or ():
            if caller.spec is None:
                impl = next(i for i in caller.get_hookimpls() if i.plugin is plugin)
                if impl.optionalhook:
                    continue
                raise PluginError(f"{where} implements {caller.name!r}, which is not an ember hook."
                                  f"{suggest(caller.name, known)} `ember hooks` lists them.{hint}")
        for attr in dir(type(plugin)):
            if attr.startswith("on_") and attr not in known:
                close = suggest(attr, EVENT_HOOKS)
                if close:
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
        """True while hook-call monitoring (tracing) is on: every call must go through pluggy."""
        return self._inner_hookexec is not self._plain_hookexec

    def add_hookcall_monitoring(self, before: Any, after: Any) -> Callable[[], None]:
        undo = super().add_hookcall_monitoring(before, after)
        self._changed()

        def undo_and_rebuild() -> None:
            undo()
            self._changed()

        return undo_and_rebuild


_IMPL_MARK = PROJECT + "_impl"
_MISSING = object()
#: Compiled hook-call sources: the code depends only on the hook and the shape of its implementations.
_compiled: dict[str, Any] = {}


def _may_be_marked(plugin: Any, name: str) -> bool:
    """False when ``plugin.name`` surely carries no ``@hookimpl`` marker; True when it may (pluggy decides).

    A fast static lookup for instances (their ``__dict__``, then the class's MRO), which is what registering
    a module with its hundreds of ``nn.Module`` attributes spends most of its time on otherwise. Classes and
    modules registered as plugins, instance attributes and slots are left to pluggy.
    """
    if isinstance(plugin, (type, types.ModuleType)):
        return True
    try:
        if name in object.__getattribute__(plugin, "__dict__"):
            return True
    except AttributeError:
        pass
    for klass in type(plugin).__mro__:
        value = vars(klass).get(name, _MISSING)
        if value is _MISSING:
            continue
        if isinstance(value, (staticmethod, classmethod, types.MethodType)):
            return getattr(value, _IMPL_MARK, None) is not None or \
                getattr(value.__func__, _IMPL_MARK, None) is not None
        if isinstance(value, types.FunctionType):
            return getattr(value, _IMPL_MARK, None) is not None
        return isinstance(value, types.MemberDescriptorType)
    return False


class HookTable:
    """The hooks as the loop calls them (``trainer.hook``), kept in step with the registered plugins.

    A hook with no implementation is ``None`` here, so the loop skips it for the price of an attribute test:
    an unimplemented hook costs nothing. So is a hook answered only by a no-op fallback of ``core.defaults``
    (one marked with :func:`noop_fallback`). Every other hook is called through a small function compiled
    for exactly its implementations (see :func:`compile_call`), which does what pluggy's ``_multicall`` does,
    wrappers included, without its per-call bookkeeping (old-style ``hookwrapper`` implementations, rare,
    keep the hook on pluggy's path). While hook-call monitoring (tracing, recorders, profilers) is on, every
    implemented hook goes through pluggy instead, and the no-op fallbacks are called like any other
    implementation, so a trace shows every call the contract makes.

    Entries are made on first use and dropped whenever the set of plugins changes, so registering a run's
    plugins one by one, or unregistering them at its end, builds nothing that is not then used.
    """

    def __init__(self, pm: PluginManager) -> None:
        self._pm = pm
        pm.subscribe(self.rebuild)

    def rebuild(self) -> None:
        """Forget every entry; each is made again, from the current plugins, when next used."""
        pm = self._pm
        self.__dict__.clear()
        self._pm = pm

    def __getattr__(self, name: str) -> Any:  # only reached for hooks not used since the last change
        caller = getattr(self._pm.hook, name, None) if not name.startswith("_") else None
        if not isinstance(caller, pluggy.HookCaller):
            raise AttributeError(f"no ember hook named {name!r}")
        entry = self._entry(caller)
        self.__dict__[name] = entry
        return entry

    def _entry(self, caller: pluggy.HookCaller) -> Any:
        fast = not self._pm.monitored
        impls = caller.get_hookimpls()
        if not impls or (fast and all(getattr(i.function, NOOP_MARK, False) for i in impls)):
            return None
        if fast and caller.spec is not None and not any(i.hookwrapper for i in impls):
            return compile_call(caller, impls)
        return caller


#: The attribute :func:`noop_fallback` sets on a function.
NOOP_MARK = "_ember_noop_fallback"


def noop_fallback(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a ``core.defaults`` answer that does nothing: when it is a hook's only implementation, the hook
    table holds None for it, so the loop skips the call (the loop checks for None at such call sites)."""
    setattr(function, NOOP_MARK, True)
    return function
def compile_call(caller: pluggy.HookCaller, impls: list[Any]) -> Callable[..., Any]:
    """A function that calls ``impls`` the way pluggy's ``_multicall`` would, for hooks without old-style
    ``hookwrapper`` implementations: new-style wrappers (``wrapper=True``) first, outermost first, each run up
    to its ``yield``; then the plain implementations, last registered first, each with the arguments it names
    (parameters with a default only when the call passes them), stopping at the first non-None answer of a
    ``firstresult`` hook, else collecting the non-None answers in a list; then the wrappers' code after the
    ``yield``, innermost first, each receiving the result (or the exception) and able to replace it.

    Its signature is the spec's, keyword-only, so a call binds its arguments without building a dict; an
    argument that no implementation needs may be left out, one that an implementation needs may not, and a
    keyword the spec lacks is an error (pluggy would silently ignore it). The generated source is kept in
    the function's ``__doc__`` for debugging.
    """
    spec = caller.spec
    assert spec is not None
    firstresult = bool(spec.opts.get("firstresult"))
    spec_args = tuple(spec.argnames) + tuple(getattr(spec, "kwargnames", ()) or ())
    required = {a for impl in impls for a in impl.argnames}
    optional_kw = {a for impl in impls for a in (impl.kwargnames or ()) if a in spec_args} - required
    params = []
    for a in spec_args:
        if a in required:
            params.append(a)
        elif a in optional_kw:
            params.append(f"{a}=_MISSING")
        else:
            params.append(f"{a}=None")
    namespace: dict[str, Any] = {"_MISSING": _MISSING, "_start": _start_wrapper, "_unwind": _unwind_wrappers}
    ordered = list(reversed(impls))  # the order pluggy calls them in: wrappers (outermost first), then plain
    wrappers = [impl for impl in ordered if impl.wrapper]
    plain = [impl for impl in ordered if not impl.wrapper]

    def call(impl: Any, i: int) -> str:
        fn = f"_f{i}"
        namespace[fn] = impl.function
        kw = [a for a in (impl.kwargnames or ()) if a in spec_args]
        args = ", ".join(list(impl.argnames) + [f"{a}={a}" for a in kw if a in required])
        maybe = [a for a in kw if a not in required]
        if maybe:
            pairs = ", ".join(f"({a!r}, {a})" for a in maybe)
            args = (args + ", " if args else "") + f"**{{_k: _v for _k, _v in ({pairs},) if _v is not _MISSING}}"
        return f"{fn}({args})"

    calls = [call(impl, i) for i, impl in enumerate(plain, start=len(wrappers))]
    inner: list[str] = []  # the plain implementations, leaving their answer in _r
    if firstresult:
        inner.append(f"_r = {calls[0]}" if calls else "_r = None")
        for expr in calls[1:]:
            inner += ["if _r is None:", f"    _r = {expr}"]
    else:
        inner.append("_r = []")
        for expr in calls:
            inner += [f"_v = {expr}", "if _v is not None:", "    _r.append(_v)"]
    if not wrappers:
        body = [f"    {line}" for line in inner] + ["    return _r"]
    else:
        body = ["    _teardowns = []", "    try:"]
        for i, impl in enumerate(wrappers):
            body += [f"        _g = {call(impl, i)}", "        _start(_g)", "        _teardowns.append(_g)"]
        body += [f"        {line}" for line in inner]
        body += ["    except BaseException as _e:", "        return _unwind(_teardowns, None, _e)",
                 "    return _unwind(_teardowns, _r, None)"]
    source = f"def {caller.name}(*, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    code = _compiled.get(source)
    if code is None:
        code = _compiled[source] = compile(source, f"<ember hook {caller.name}>", "exec")
    exec(code, namespace)
    function = namespace[caller.name]
    function.__doc__ = source
    function.__qualname__ = f"HookTable.{caller.name}"
    return function


def _wrapfail(wrapper: Any, message: str) -> RuntimeError:
    code = wrapper.gi_code
    return RuntimeError(f"wrap_controller at {code.co_name!r} {code.co_filename}:{code.co_firstlineno} {message}")


def _start_wrapper(wrapper: Any) -> None:
    """Run a new-style wrapper up to its ``yield``."""
    try:
        next(wrapper)
    except StopIteration:
        raise _wrapfail(wrapper, "did not yield") from None


def _unwind_wrappers(teardowns: list[Any], result: Any, exception: BaseException | None) -> Any:
    """Run the wrappers' code after their ``yield``, innermost first, as pluggy's ``_multicall`` does: each
    receives the result (``send``) or the exception (``throw``) and may replace either."""
    for teardown in reversed(teardowns):
        try:
            if exception is not None:
                try:
                    teardown.throw(exception)
                except RuntimeError as error:
                    # a StopIteration raised into a generator comes out as a RuntimeError caused by it
                    if isinstance(exception, StopIteration) and error.__cause__ is exception:
                        teardown.close()
                        continue
                    raise
            else:
                teardown.send(result)
            teardown.close()
        except StopIteration as stop:
            result, exception = stop.value, None
            continue
        except BaseException as error:
            exception = error
            continue
        raise _wrapfail(teardown, "has second yield")
    if exception is not None:
        raise exception
    return result
