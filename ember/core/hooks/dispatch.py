"""How ember calls a hook: the one dispatch path (the per-run :class:`HookTable`, ``trainer.hook``).

Every hook the loop, the Trainer and checkpointing call goes through a function built here for exactly the
hook's current implementations: :func:`compile_call` writes out pluggy's call loop for them (wrappers, old-style
hookwrappers, ``firstresult``), with no per-call bookkeeping. Hook-call monitors (tracing, profilers, recorders)
are added with pluggy's public ``PluginManager.add_hookcall_monitoring``; while one is on, the table's
functions call its ``before``/``after`` around the same compiled call, with the implementations the monitor
handed back (a tracer swaps in timed copies). Only pluggy's public API is read: ``HookCaller.get_hookimpls()``
and ``.spec``, the ``HookImpl`` fields, ``HookImpl(...)`` and ``Result(...)``;
``tests/test_hook_table.py`` checks every call shape against pluggy's own ``HookCaller.__call__``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import pluggy

#: A hook-call monitor: pluggy's ``(before, after)`` pair.
Monitor = tuple[Callable[..., Any], Callable[..., Any]]
#: The attribute :func:`noop_fallback` sets on a function.
NOOP_MARK = "_ember_noop_fallback"
_MISSING = object()
#: Compiled hook calls (code and source) by the hook and the shape of its implementations, on which alone they depend.
_compiled: dict[tuple, tuple[Any, str]] = {}


def noop_fallback(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a ``core.defaults`` answer that does nothing: when it is a hook's only implementation, the hook
    table holds None for it, so the loop skips the call (the loop checks for None at such call sites)."""
    setattr(function, NOOP_MARK, True)
    return function


class HookTable:
    """The hooks as ember calls them (``trainer.hook``), kept in step with the registered plugins.

    ``table.<hook>`` is None for a hook with no implementation, so the loop skips it for the price of an
    attribute test: an unimplemented hook costs nothing. So is a hook answered only by a no-op fallback of
    ``core.defaults`` (one marked with :func:`noop_fallback`), unless a monitor is on: then the fallback is
    called like any other implementation, so a trace shows every call the contract makes. Every other hook is
    a function from :func:`compile_call`, wrapped by :func:`monitored_call` while monitors are on.
    ``table.call(name, **kwargs)`` calls a hook whether or not it is implemented (the answer of an
    unimplemented hook is None, or ``[]`` for a hook that collects answers): for call sites off the hot path.

    Entries are made on first use and dropped whenever the plugins or the monitors change, so registering a
    run's plugins one by one, or unregistering them at its end, builds nothing that is not then used.
    """

    def __init__(self, pm: Any) -> None:
        self._pm = pm
        pm.subscribe(self.rebuild)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return HookTable, (self._pm,)  # its entries are made again when used

    def rebuild(self) -> None:
        """Forget every entry; each is made again, from the current plugins, when next used."""
        pm = self._pm
        self.__dict__.clear()
        self._pm = pm

    def __getattr__(self, name: str) -> Any:  # only reached for hooks not used since the last change
        entry = self._entry(self._caller(name), None)
        self.__dict__[name] = entry
        return entry

    def _caller(self, name: str) -> pluggy.HookCaller:
        caller = getattr(self._pm.hook, name, None) if not name.startswith("_") else None
        if not isinstance(caller, pluggy.HookCaller) or caller.spec is None:
            raise AttributeError(f"no ember hook named {name!r}")
        return caller

    def _entry(self, caller: pluggy.HookCaller, wrap: Callable[[Any], Any] | None,
               keep: Callable[[Any], bool] | None = None) -> Any:
        monitors: Sequence[Monitor] = self._pm.monitors
        impls = caller.get_hookimpls()
        if keep is not None:
            impls = [impl for impl in impls if keep(impl.plugin)]
        if wrap is not None:
            impls = [wrap(impl) for impl in impls]
        if not impls or (not monitors and all(getattr(i.function, NOOP_MARK, False) for i in impls)):
            return None
        if monitors:
            return monitored_call(caller, impls, monitors)
        return compile_call(caller, impls)

    def call(self, name: str, /, **kwargs: Any) -> Any:
        """Call the hook ``name`` with ``kwargs``, implemented or not (see the class docstring)."""
        entry = getattr(self, name)
        if entry is not None:
            return entry(**kwargs)
        caller = self._caller(name)
        return None if caller.spec is not None and caller.spec.opts.get("firstresult") else []

    def call_each(self, name: str, wrap: Callable[[pluggy.HookImpl], pluggy.HookImpl], /, **kwargs: Any) -> Any:
        """Call the hook ``name`` with each implementation replaced by ``wrap(impl)`` (``Trainer`` guards the
        ``on_exception`` handlers this way, so that one failing handler cannot hide the others)."""
        entry = self._entry(self._caller(name), wrap)
        return entry(**kwargs) if entry is not None else None

    def call_some(self, name: str, keep: Callable[[Any], bool], /, **kwargs: Any) -> Any:
        """Call the hook ``name`` on the implementations of the plugins that ``keep(plugin)`` accepts only
        (``on_load_checkpoint`` runs the module's before its weights are loaded, the other plugins' after)."""
        entry = self._entry(self._caller(name), None, keep)
        return entry(**kwargs) if entry is not None else None


def monitored_call(caller: pluggy.HookCaller, impls: list[pluggy.HookImpl],
                   monitors: Sequence[Monitor]) -> Callable[..., Any]:
    """The call of ``impls`` with every monitor's ``before`` and ``after`` around it, as pluggy nests them: the
    monitor added last is outermost. ``before`` may replace implementations in the list it receives."""
    name = caller.name
    cache: dict[tuple[int, ...], tuple[list[Any], Callable[..., Any]]] = {}

    def call(**kwargs: Any) -> Any:
        run = list(impls)
        for before, _ in reversed(monitors):
            before(name, run, kwargs)
        key = tuple(map(id, run))
        cached = cache.get(key)
        if cached is None:
            cached = cache[key] = (run, compile_call(caller, run))  # keeps ``run`` alive: its ids stay unique
        try:
            outcome = pluggy.Result(cached[1](**kwargs), None)
        except BaseException as exc:
            outcome = pluggy.Result(None, exc)
        for _, after in monitors:
            after(outcome, name, run, kwargs)
        return outcome.get_result()

    call.__qualname__ = f"HookTable.{name}"
    return call


def compile_call(caller: pluggy.HookCaller, impls: list[Any]) -> Callable[..., Any]:
    """A function that calls ``impls`` the way pluggy's call loop does: wrappers first (new-style
    ``wrapper=True`` and old-style ``hookwrapper=True``, outermost first), each run up to its ``yield``; then
    the plain implementations, last registered first, each with the arguments it names (parameters with a
    default only when the call passes them), stopping at the first non-None answer of a ``firstresult`` hook,
    else collecting the non-None answers in a list; then the wrappers' code after the ``yield``, innermost
    first, each receiving the result (or the exception) and able to replace it.

    Its signature is the spec's, keyword-only, so a call binds its arguments without building a dict; an
    argument that no implementation needs may be left out, one that an implementation needs may not, and a
    keyword the spec lacks is an error (pluggy would silently ignore it). The generated source is kept in
    the function's ``__doc__`` for debugging.
    """
    spec = caller.spec
    assert spec is not None
    spec_args = tuple(spec.argnames) + tuple(getattr(spec, "kwargnames", ()) or ())
    firstresult = bool(spec.opts.get("firstresult"))
    ordered = list(reversed(impls))  # the order pluggy calls them in: wrappers (outermost first), then plain
    wrappers = [impl for impl in ordered if impl.wrapper or impl.hookwrapper]
    plain = [impl for impl in ordered if not (impl.wrapper or impl.hookwrapper)]
    # The source depends on nothing else: every run's table calls the same hooks with the same shapes.
    shape = (caller.name, spec_args, firstresult,
             tuple((impl.argnames, impl.kwargnames, impl.wrapper, impl.hookwrapper) for impl in wrappers + plain))
    found = _compiled.get(shape)
    if found is None:
        source = _source(caller.name, spec_args, firstresult, wrappers, plain)
        found = _compiled[shape] = (compile(source, f"<ember hook {caller.name}>", "exec"), source)
    code, source = found
    namespace: dict[str, Any] = {"_MISSING": _MISSING, "_start": _start_wrapper, "_unwind": _unwind_wrappers,
                                 "_old": _old_style}
    for i, impl in enumerate(wrappers + plain):
        namespace[f"_f{i}"] = impl.function
    exec(code, namespace)
    function = namespace[caller.name]
    function.__doc__ = source
    function.__qualname__ = f"HookTable.{caller.name}"
    return function


def _source(name: str, spec_args: tuple[str, ...], firstresult: bool, wrappers: list[Any], plain: list[Any]) -> str:
    """The source of :func:`compile_call`'s function; ``_f<i>`` is the i-th of ``wrappers + plain``."""
    required = {a for impl in wrappers + plain for a in impl.argnames}
    optional_kw = {a for impl in wrappers + plain for a in (impl.kwargnames or ()) if a in spec_args} - required
    params = [a if a in required else f"{a}=_MISSING" if a in optional_kw else f"{a}=None" for a in spec_args]

    def call(impl: Any, i: int) -> str:
        kw = [a for a in (impl.kwargnames or ()) if a in spec_args]
        args = ", ".join(list(impl.argnames) + [f"{a}={a}" for a in kw if a in required])
        maybe = [a for a in kw if a not in required]
        if maybe:
            pairs = ", ".join(f"({a!r}, {a})" for a in maybe)
            args = (args + ", " if args else "") + f"**{{_k: _v for _k, _v in ({pairs},) if _v is not _MISSING}}"
        return f"_f{i}({args})" if not impl.hookwrapper else f"_old(_f{i}({args}))"

    calls = [call(impl, i) for i, impl in enumerate(plain, start=len(wrappers))]
    inner = _plain_calls(calls, firstresult)
    if not wrappers:
        body = [f"    {line}" for line in inner] + ["    return _r"]
    else:
        body = ["    _teardowns = []", "    try:"]
        for i, impl in enumerate(wrappers):
            body += [f"        _g = {call(impl, i)}", "        _start(_g)", "        _teardowns.append(_g)"]
        body += [f"        {line}" for line in inner]
        body += ["    except BaseException as _e:", "        return _unwind(_teardowns, None, _e)",
                 "    return _unwind(_teardowns, _r, None)"]
    return f"def {name}(*, {', '.join(params)}):\n" + "\n".join(body) + "\n"


def _plain_calls(calls: list[str], firstresult: bool) -> list[str]:
    """Source lines calling the plain implementations, leaving the hook's answer in ``_r``."""
    if firstresult:
        lines = [f"_r = {calls[0]}" if calls else "_r = None"]
        for expr in calls[1:]:
            lines += ["if _r is None:", f"    _r = {expr}"]
        return lines
    lines = ["_r = []"]
    for expr in calls:
        lines += [f"_v = {expr}", "if _v is not None:", "    _r.append(_v)"]
    return lines


def _wrapfail(wrapper: Any, message: str) -> RuntimeError:
    code = wrapper.gi_code
    return RuntimeError(f"wrap_controller at {code.co_name!r} {code.co_filename}:{code.co_firstlineno} {message}")


def _start_wrapper(wrapper: Any) -> None:
    """Run a wrapper up to its ``yield``."""
    try:
        next(wrapper)
    except StopIteration:
        raise _wrapfail(wrapper, "did not yield") from None


def _old_style(teardown: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """An old-style ``hookwrapper`` as a new-style one: it receives a :class:`pluggy.Result` at its ``yield``."""
    _start_wrapper(teardown)
    try:
        outcome = pluggy.Result((yield), None)
    except BaseException as exc:
        outcome = pluggy.Result(None, exc)
    try:
        teardown.send(outcome)
    except StopIteration:
        pass
    else:
        raise _wrapfail(teardown, "has second yield")
    finally:
        teardown.close()
    return outcome.get_result()


def _unwind_wrappers(teardowns: list[Any], result: Any, exception: BaseException | None) -> Any:
    """Run the wrappers' code after their ``yield``, innermost first, as pluggy's call loop does: each
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
