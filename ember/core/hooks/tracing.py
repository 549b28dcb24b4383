"""Hook tracing: one JSON line per hook call, with the plugins that ran and the time each took.

Switched on by ``Trainer(trace=...)`` or the ``EMBER_TRACE`` environment variable (the argument wins):
``True``/``"1"``/``"stderr"`` writes to standard error, ``"stdout"`` to standard output, any other string or
path names a file (JSON lines, rewritten by the first run of the Trainer, appended to by later runs), and an
object with a ``write`` method receives the lines. ``False``/``"0"`` or unset: off, and nothing is installed,
so tracing off costs nothing per step.

It rides on pluggy's ``add_hookcall_monitoring``: while a traced run is on, the hook table calls the tracer
around every hook call (see :mod:`ember.core.hooks.dispatch`), and each implementation is swapped for a timed copy
for the duration of the call. A record looks like::

    {"seq": 41, "depth": 0, "hook": "on_after_backward", "epoch": 0, "step": 3, "us": 9.1,
     "impls": [{"plugin": "callback.grad-clip", "us": 5.0}, {"plugin": "module", "us": 1.2}]}

``impls`` lists the implementations in the order they started (wrappers first, marked ``"wrapper": true``,
with the time of their own code around the ``yield``); ``"returned": true`` marks an implementation that
returned a value (for a ``firstresult`` hook: the one that answered); ``"raised"`` names an exception that
left the implementation. Calls made inside another call (``depth`` > 0) are written in the order they
started, right after the outer call ends.
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import time
from collections.abc import Generator, Sequence
from typing import IO, Any

import pluggy

TRACE_ENV = "EMBER_TRACE"
_OFF = ("", "0", "false", "no", "off")
_STDERR = ("1", "true", "yes", "on", "stderr")


def resolve_target(arg: Any) -> Any:
    """The trace destination for a ``trace=`` argument (None means: ask ``EMBER_TRACE``); None when off."""
    if arg is None:
        arg = os.environ.get(TRACE_ENV, "")
    if arg is False:
        return None
    if arg is True:
        return sys.stderr
    if isinstance(arg, str):
        low = arg.strip().lower()
        if low in _OFF:
            return None
        if low in _STDERR:
            return sys.stderr
        if low == "stdout":
            return sys.stdout
        return os.path.abspath(os.path.expanduser(arg.strip()))
    if isinstance(arg, os.PathLike):
        return os.path.abspath(os.fspath(arg))
    return arg  # a stream; TrainerConfig checked that it has a ``write`` method


class _Call:
    __slots__ = ("seq", "depth", "hook", "epoch", "step", "start", "us", "impls", "error")

    def __init__(self, seq: int, depth: int, hook: str, epoch: int, step: int) -> None:
        self.seq, self.depth, self.hook, self.epoch, self.step = seq, depth, hook, epoch, step
        self.start = time.perf_counter()
        self.us = 0.0
        self.impls: list[dict[str, Any]] = []
        self.error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "depth": self.depth, "hook": self.hook, "epoch": self.epoch,
                               "step": self.step, "us": round(self.us, 2), "impls": self.impls}
        if self.error is not None:
            out["error"] = self.error
        return out


class HookTracer:
    """Traces one trainer's hook calls while :meth:`start`-ed; see the module docstring."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self._stream: IO[str] | None = None
        self._owns_stream = False
        self._started_once = False
        self._undo: Any = None
        self._trainer: Any = None
        self._stack: list[_Call] = []
        self._pending: list[_Call] = []
        self._seq = 0
        self._timed: dict[int, tuple[pluggy.HookImpl, pluggy.HookImpl]] = {}

    # -- switching on and off ------------------------------------------------------------------------------
    def start(self, trainer: Any, fn: str) -> None:
        """Open the destination, write the run's header line and install the monitor."""
        if isinstance(self.target, str):
            mode = "a" if self._started_once else "w"
            os.makedirs(os.path.dirname(self.target) or ".", exist_ok=True)
            self._stream = open(self.target, mode, encoding="utf-8")  # noqa: SIM115 (closed in stop)
            self._owns_stream = True
        else:
            self._stream = self.target
        self._started_once = True
        self._trainer = trainer
        self._seq = 0
        pm = trainer.plugin_manager
        # Hook implementations run LIFO; list the plugins in the order their plain implementations run.
        plugins = [{"plugin": name, "from": pm.origins.get(name)} for name, _ in reversed(pm.list_name_plugin())]
        self._write({"run": fn, "plugins": plugins})
        self._undo = pm.add_hookcall_monitoring(self._before, self._after)

    def stop(self) -> None:
        """Remove the monitor, flush what is pending and close a file this tracer opened."""
        if self._undo is not None:
            self._undo()
            self._undo = None
        self._flush_pending()
        self._stack.clear()
        self._timed.clear()
        self._trainer = None
        stream, self._stream = self._stream, None
        if stream is not None:
            if self._owns_stream:
                stream.close()
            else:
                try:
                    stream.flush()
                except (OSError, ValueError, io.UnsupportedOperation):
                    pass
        self._owns_stream = False

    # -- the monitor -------------------------------------------------------------------------------------
    def _before(self, hook_name: str, impls: list[pluggy.HookImpl], kwargs: Any) -> None:
        t = self._trainer
        call = _Call(self._seq, len(self._stack), hook_name, t.current_epoch, t.global_step)
        self._seq += 1
        self._stack.append(call)
        self._pending.append(call)
        # ``before`` receives the very list (a per-call copy) that is then run: swap in timed copies.
        for i, impl in enumerate(impls):
            impls[i] = self._timed_copy(impl)

    def _after(self, outcome: pluggy.Result, hook_name: str, impls: Sequence[Any], kwargs: Any) -> None:
        call = self._stack.pop()
        call.us = (time.perf_counter() - call.start) * 1e6
        if outcome.exception is not None:
            call.error = f"{type(outcome.exception).__name__}: {outcome.exception}"
        if not self._stack:
            self._flush_pending()

    def _flush_pending(self) -> None:
        for call in sorted(self._pending, key=lambda c: c.seq):
            self._write(call.as_dict())
        self._pending.clear()

    def _write(self, record: dict[str, Any]) -> None:
        if self._stream is not None:
            self._stream.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")

    # -- timed copies of implementations ---------------------------------------------------------------------
    def _timed_copy(self, impl: pluggy.HookImpl) -> pluggy.HookImpl:
        cached = self._timed.get(id(impl))
        if cached is not None and cached[0] is impl:
            return cached[1]
        timed = copy.copy(impl)
        timed.function = self._wrap(impl)  # type: ignore[misc]  # pluggy marks it Final
        self._timed[id(impl)] = (impl, timed)
        return timed

    def _wrap(self, impl: pluggy.HookImpl) -> Any:
        function, name, stack = impl.function, impl.plugin_name, self._stack

        if impl.wrapper or impl.hookwrapper:
            def timed_wrapper(*args: Any, **kwargs: Any) -> Any:
                entry: dict[str, Any] = {"plugin": name, "wrapper": True, "us": 0.0}
                stack[-1].impls.append(entry)
                generator: Generator[Any, Any, Any] = function(*args, **kwargs)  # type: ignore[assignment]
                return _timed_generator(generator, entry)

            return timed_wrapper

        def timed(*args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {"plugin": name, "us": 0.0}
            stack[-1].impls.append(entry)
            start = time.perf_counter()
            try:
                result = function(*args, **kwargs)
            except BaseException as exc:
                entry["raised"] = type(exc).__name__
                raise
            finally:
                entry["us"] = round((time.perf_counter() - start) * 1e6, 2)
            if result is not None:
                entry["returned"] = True
            return result

        return timed


def _timed_generator(gen: Generator[Any, Any, Any], entry: dict[str, Any]) -> Generator[Any, Any, Any]:
    """Drive a wrapper's generator, adding the time spent in its own code (not in what it wraps) to ``entry``."""
    spent = 0.0
    thrown: BaseException | None = None
    start = time.perf_counter()
    try:
        try:
            yielded = next(gen)
        finally:
            spent += time.perf_counter() - start
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                gen.close()
                raise
            except BaseException as exc:
                thrown = exc
                start = time.perf_counter()
                try:
                    yielded = gen.throw(exc)
                finally:
                    spent += time.perf_counter() - start
            else:
                start = time.perf_counter()
                try:
                    yielded = gen.send(sent)
                finally:
                    spent += time.perf_counter() - start
    except StopIteration as stop:
        return stop.value
    except BaseException as exc:
        if exc is not thrown:  # raised by the wrapper itself, not just passed on from what it wraps
            entry["raised"] = type(exc).__name__
        raise
    finally:
        entry["us"] = round(spent * 1e6, 2)
