"""``callback.hang-watchdog``: a process that stops making progress stops the whole job, naming itself.

On for every multi-process run (``Trainer(hang_timeout=600)``, seconds; None or 0 switches it off). Without
it, a process that hangs (a deadlock, stuck I/O, a step that never returns) leaves the others waiting in
their next collective until the process group's timeout (30 minutes), and the error then names whichever
process timed out first, often not the one that hung.

How it works: every process counts the loop's events (batch start and end, backward, optimizer step, epoch
and validation boundaries). A daemon thread per process publishes that count, the global step and where its main
thread is (the innermost hook or step method on its stack, and the line) in torch.distributed's store, every ``hang_timeout / 5`` seconds (at most 5 s). Global rank 0's thread reads
every process's record; every other process's thread reads rank 0's (so a rank 0 that froze entirely is
noticed too). When a process's count has not moved for ``hang_timeout`` seconds (or 0.7 of the strategy's
collective ``timeout``, when that is shorter: the watchdog decides before a collective times out, so that a
waiting process never looks guilty), the verdict names the
process that got least far (a process waiting in a collective for it has counted the events before that
collective): its rank, its last global step and the hook it was in. The clock starts with the first
event of the loop (the first epoch or validation), so a slow start-up (process group, model wrapping) is
never taken for a hang. The verdict goes into the store; every
process then raises :class:`ember.HangError` in its main thread and, if that thread is blocked in native code
(a collective, a sleep), exits with status 1 a few seconds later, after recording the error for the launcher.
That record names the hung process, its last step and hook, so that the launcher reports a process that could
not record anything itself (stopped by SIGSTOP, killed in the end by the launcher) as hung, not as killed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from ember.core.errors import ConfigurationError, HangError
from ember.hookspecs import hookimpl

log = logging.getLogger("ember")

#: Seconds between heartbeats: ``hang_timeout / BEATS_PER_TIMEOUT``, at most MAX_INTERVAL.
BEATS_PER_TIMEOUT = 5
MAX_INTERVAL = 5.0
#: Seconds a process's main thread gets to stop on the HangError before the process exits.
GRACE = 3.0
#: The watchdog decides within this fraction of the process group's collective timeout, so that the process
#: that hung is named even when the collective timeout is the shorter one (else a waiting process's collective
#: would time out first and look guilty).
BEFORE_COLLECTIVE = 0.7
_STEP_METHODS = frozenset({"training_step", "validation_step", "test_step", "predict_step", "forward",
                           "configure_optimizers", "configure_model", "backward", "optimizer_step"})
_runs = {"count": 0}


def timeout_seconds(value: Any) -> float | None:
    """``Trainer(hang_timeout=...)`` in seconds (None: off)."""
    if value is None or value is False:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise ConfigurationError(f"Trainer(hang_timeout={value!r}) is invalid: expected seconds > 0 (or a "
                                 "timedelta), or None / 0 to switch the hang watchdog off.")
    return float(value) or None


def _tick() -> Any:
    def tick(self: Progress) -> None:
        self.count += 1

    return hookimpl(tick)


class Progress:
    """Counts the loop's events on this process (registered for multi-process runs only)."""

    identity = "callback.hang-watchdog-progress"

    def __init__(self) -> None:
        self.count = 0

    on_train_batch_start = _tick()
    on_train_batch_end = _tick()
    on_before_backward = _tick()
    on_after_backward = _tick()
    on_before_optimizer_step = _tick()
    on_train_epoch_start = _tick()
    on_train_epoch_end = _tick()
    on_validation_start = _tick()
    on_validation_end = _tick()
    on_validation_batch_start = _tick()
    on_validation_batch_end = _tick()
    on_test_batch_start = _tick()
    on_test_batch_end = _tick()
    on_predict_batch_start = _tick()
    on_predict_batch_end = _tick()


class HangWatchdog:
    """Stops every process of a job when one of them stops making progress (see the module docstring)."""

    identity = "callback.hang-watchdog"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("hang_timeout", type="float | timedelta | None", default=600.0, validate=timeout_seconds,
                    switches="callback.hang-watchdog",
                    help="seconds without progress after which a multi-process job stops, naming the stuck "
                         "process; None or 0: off")

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._monitor: _Monitor | None = None

    @hookimpl
    def setup(self, trainer: Any, stage: str) -> None:
        timeout = timeout_seconds(trainer.config.hang_timeout)
        if timeout is None or trainer.world_size < 2 or self._monitor is not None:
            return
        collective = _collective_timeout(trainer)
        if collective is not None and timeout > BEFORE_COLLECTIVE * collective:
            log.info("hang watchdog: deciding after %g s, before the process group's %g s collective timeout "
                     "(hang_timeout=%g)", BEFORE_COLLECTIVE * collective, collective, timeout)
            timeout = BEFORE_COLLECTIVE * collective
        store = _store()
        if store is None:
            log.warning("hang watchdog: no torch.distributed store to meet in; hangs are not detected")
            return
        _runs["count"] += 1  # every process counts its runs alike: a fresh key space per run
        import torch.distributed as dist

        prefixed = dist.PrefixStore(f"ember/hang-watchdog/{_runs['count']}/", store)
        self._progress = Progress()
        trainer.plugin_manager.register(self._progress, name=Progress.identity)
        self._monitor = _Monitor(trainer, self._progress, prefixed, timeout)
        self._monitor.start()

    @hookimpl
    def on_exception(self, trainer: Any) -> None:
        self.teardown(trainer)  # a run that fails before its teardown must not leave a watching thread

    @hookimpl
    def teardown(self, trainer: Any) -> None:
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        if self._progress is not None:
            if trainer.plugin_manager.is_registered(self._progress):
                trainer.plugin_manager.unregister(self._progress)
            self._progress = None


def _collective_timeout(trainer: Any) -> float | None:
    """Seconds after which the strategy's collectives time out (its ``timeout``), or None when unknown."""
    try:
        value = getattr(trainer.strategy, "timeout", None)
    except (KeyError, AttributeError):
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _store() -> Any:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, AttributeError, ValueError):  # pragma: no cover - a group without a store
        return None


@functools.lru_cache(maxsize=1)
def _hook_names() -> frozenset[str]:
    """The names :func:`_where` looks for (read from the hook specs once: that takes tens of milliseconds)."""
    from ember.hookspecs.reference import spec_names

    return spec_names() | _STEP_METHODS


def _where(thread_id: int | None) -> tuple[str, str]:
    """(the innermost hook or step method on the main thread's stack, ``file:line`` of its innermost frame)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return "?", "?"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    hooks = _hook_names()
    while frame is not None:
        if frame.f_code.co_name in hooks:
            return frame.f_code.co_name, where
        frame = frame.f_back
    return "?", where


class _Monitor:
    """The daemon thread of one process: heartbeats, watching, and acting on a verdict."""

    def __init__(self, trainer: Any, progress: Progress, store: Any, timeout: float) -> None:
        self.trainer, self.progress, self.store, self.timeout = trainer, progress, store, timeout
        self.rank, self.world = trainer.global_rank, trainer.world_size
        self.interval = max(0.05, min(MAX_INTERVAL, timeout / BEATS_PER_TIMEOUT))
        self.main = threading.main_thread().ident
        self.done = threading.Event()
        self.beat = 0
        #: rank -> (count, beat, monotonic time the count last moved, monotonic time the beat last moved)
        self.seen: dict[int, tuple[int, int, float, float]] = {}
        self.thread = threading.Thread(target=self._run, name="ember-hang-watchdog", daemon=True)

    def start(self) -> None:
        self._publish()
        self.thread.start()

    def stop(self) -> None:
        self.done.set()

    def _run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                self._publish()
                verdict = self._verdict()
            except Exception as exc:  # the store went away: the job is ending anyway
                log.debug("hang watchdog stopped: %s", exc)
                return
            if verdict:
                self._stop_everything(verdict)
                return

    def _publish(self) -> None:
        # where the main thread is, at every heartbeat (a walk of its stack, once per interval): a process that
        # stops entirely is then known by the hook of its last heartbeat
        hook, where = _where(self.main)
        self.beat += 1
        record = {"count": self.progress.count, "beat": self.beat, "step": int(self.trainer.global_step), "hook": hook,
                  "where": where}
        self.store.set(f"rank/{self.rank}", json.dumps(record))

    def _verdict(self) -> str:
        if self.store.check(["verdict"]):
            return self.store.get("verdict").decode()
        # rank 0 watches everyone; the others watch rank 0 (its hang stops the job too) and know where they are
        # themselves, so that whichever process reaches the verdict first can say who waits for whom
        ranks = range(self.world) if self.rank == 0 else sorted({0, self.rank})
        now = time.monotonic()
        records = {}
        for r in ranks:
            key = f"rank/{r}"
            if not self.store.check([key]):
                continue
            rec = json.loads(self.store.get(key))
            records[r] = rec
            count, beat, moved, beat_moved = self.seen.get(r, (-1, -1, now, now))
            self.seen[r] = (rec["count"], rec["beat"], now if rec["count"] != count else moved,
                            now if rec["beat"] != beat else beat_moved)
        stalled = [r for r in records if now - self.seen[r][2] > self.timeout]
        if not any(records[r]["count"] > 0 for r in stalled):  # the clock runs from a process's first event
            return ""
        frozen = [r for r in stalled if now - self.seen[r][3] > self.timeout]
        # The first process past the timeout may be one that ran ahead into a collective and waits there for
        # the stuck one, which stopped a moment later: every process that has stood still for a couple of
        # heartbeats is a suspect, and the one that got least far is blamed.
        still = [r for r in records if now - self.seen[r][2] > min(self.timeout, 2 * self.interval)]
        least = min(records[r]["count"] for r in still)
        culprits = frozen or [r for r in still if records[r]["count"] == least]
        hung = {str(r): {"step": records[r]["step"], "hook": records[r]["hook"], "where": records[r]["where"],
                         "frozen": bool(frozen), "timeout": self.timeout} for r in culprits}
        verdict = json.dumps({"message": _message(culprits, records, self.timeout, bool(frozen)),
                              "culprits": culprits, "hung": hung})
        # the first verdict stands: every process reports the same one
        return self.store.compare_set("verdict", "", verdict).decode() or verdict

    def _stop_everything(self, verdict: str) -> None:
        import ctypes

        import torch.distributed as dist

        decided = json.loads(verdict)
        message = decided["message"]
        log.error("%s", message)
        # On the processes that waited for the stuck one, the error is a peer's fault (a DistError), so the
        # launcher names the stuck process as the one that failed first.
        bases = (HangError,) if self.rank in decided["culprits"] else (HangError, dist.DistError)
        # ember_info goes into the error file the launcher reads: a hung process that cannot write its own (one
        # stopped by SIGSTOP, killed by the launcher in the end) is still named as hung, not as merely killed
        kind = type("HangError", bases, {"__init__": lambda exc, *args: HangError.__init__(exc, message),
                                         "__module__": HangError.__module__,
                                         "ember_info": {"hung": decided.get("hung", {})}})
        try:
            from ember.plugins._shared.launchers import write_error_file

            write_error_file(kind(), self.rank)
        except Exception:  # pragma: no cover - only a record for the launcher
            pass
        if self.main is not None:  # raised in the main thread when it next runs Python code
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.main), ctypes.py_object(kind))
        if not self.done.wait(GRACE):  # the main thread is blocked in native code (a collective, a sleep)
            sys.stderr.flush()
            os._exit(1)


def _message(culprits: list[int], records: dict[int, dict], timeout: float, frozen: bool) -> str:
    parts = []
    for r in culprits:
        rec = records[r]
        if frozen:  # its own heartbeat stopped too: the step and hook are those of the last one it published
            parts.append(f"rank {r} made no progress for {timeout:g} s and sent no heartbeat (the whole process "
                         f"is stopped, e.g. by SIGSTOP or a debugger, or frozen); last heard from at global step "
                         f"{rec['step']}" + (f", in {rec['hook']}" if rec["hook"] not in ("", "?") else ""))
            continue
        parts.append(f"rank {r} made no progress for {timeout:g} s at global step {rec['step']}, in "
                     f"{rec['hook'] or '?'} ({rec['where'] or 'unknown place'})")
    others = sorted(set(records) - set(culprits))
    tail = f"; ranks {others} wait for it" if others and len(records) > 1 else ""
    return ("; ".join(parts) + tail + ". Every process stops. Raise Trainer(hang_timeout=...) if a step "
            "legitimately takes that long.")
