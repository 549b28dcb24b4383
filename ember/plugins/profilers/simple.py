"""``profiler.simple``: where a run spends its time, per hook and per phase (``Trainer(profiler="simple")``).

While it is on, every hook call goes through pluggy's hook-call monitoring, which times it (inclusive of the
calls nested in it); the profiler also implements the batch, epoch and stage events so that it can time the
phases between them. At the end of each run (``fit``, ``validate``, ``test``, ``predict``) it prints a table
and writes it to ``<dir>/simple-profile-<fn>.txt``, with the same figures in ``.json`` beside it; ``<dir>`` is
``dirpath``, else the first logger's version folder, else ``default_root_dir``.

Monitoring makes each hook call cost a few microseconds more than in an unprofiled run, so the figures of
very short hooks are upper bounds; the phases of real work (steps, validation, data) are what to read.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins.profilers import output_path

#: (event that opens the phase, event that closes it, the phase's name), in the order the table lists them.
PHASES = (
    ("on_sanity_check_start", "on_sanity_check_end", "sanity check"),
    ("on_train_epoch_start", "on_train_epoch_end", "train epoch"),
    ("on_train_batch_start", "on_train_batch_end", "train batch"),
    ("on_validation_start", "on_validation_end", "validation"),
    ("on_validation_batch_start", "on_validation_batch_end", "validation batch"),
    ("on_test_start", "on_test_end", "test"),
    ("on_test_batch_start", "on_test_batch_end", "test batch"),
    ("on_predict_start", "on_predict_end", "predict"),
    ("on_predict_batch_start", "on_predict_batch_end", "predict batch"),
)
#: The time from the end of one training batch (or the start of the epoch) to the start of the next batch,
#: less any validation run in between: fetching the batch, moving it to the device, per-step logging.
DATA_PHASE = "train data (fetch, transfer)"
#: From ``configure`` (the run's first hook) to the first of these: registering, setting up, building the
#: optimizers, loading a checkpoint.
SETUP_PHASE = "set-up"
_SETUP_ENDS = frozenset({"on_sanity_check_start", "on_train_start", "on_validation_start", "on_test_start",
                         "on_predict_start"})
_OPENS = {start: name for start, _, name in PHASES}
_CLOSES = {end: name for _, end, name in PHASES}
_IN_SANITY = frozenset({"validation", "validation batch"})  # counted under "sanity check" instead


def _timed_event(self: Any) -> None:
    """An event the profiler implements only so that it is called (and timed)."""


class SimpleProfiler:
    """Time per hook and per phase of each run, printed and written at its end.

    :param dirpath: where to write (default: the first logger's version folder, else ``default_root_dir``).
    :param filename: the file name's stem; ``-<fn>`` (and ``-rank<r>`` with several processes) is appended.
    :param print_summary: print the table on global rank 0 at the end of each run.

    After a run, :attr:`summary` holds the figures as a dict (``phases`` and ``hooks``, each name mapping to
    ``calls``, ``total_s``, ``max_s``), and :attr:`path` the text file written.
    """

    role = "profiler"
    identity = "profiler.simple"

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str = "simple-profile",
                 print_summary: bool = True) -> None:
        self.dirpath = dirpath
        self.filename = filename
        self.print_summary = print_summary
        self.summary: dict[str, Any] = {}
        self.path: str | None = None
        self._trainer: Any = None
        self._undo: Callable[[], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._hooks: dict[str, list[float]] = {}  # name -> [calls, total, max]
        self._phases: dict[str, list[float]] = {}
        self._stack: list[float] = []
        self._open: dict[str, float] = {}
        self._gap_start: float | None = None
        self._gap_excluded = 0.0
        self._t0 = time.perf_counter()
        self._in_setup = True

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    def configure(self, trainer: Any) -> None:
        if self._undo is not None:  # a run that ended before its teardown left monitoring on
            self._undo()
        self._trainer = trainer
        self._reset()
        self._undo = trainer.plugin_manager.add_hookcall_monitoring(self._before, self._after)

    @hookimpl
    def on_exception(self, trainer: Any) -> None:
        if not trainer.state.get("setup_done"):  # no teardown will follow: finish here
            self._finish()

    # The events that open and close phases: implemented (as no-ops) so that the loop calls them, through the
    # monitoring that times them.
    on_sanity_check_start = on_sanity_check_end = _timed_event
    on_train_epoch_start = on_train_epoch_end = on_train_batch_start = on_train_batch_end = _timed_event
    on_validation_start = on_validation_end = on_validation_batch_start = on_validation_batch_end = _timed_event
    on_test_start = on_test_end = on_test_batch_start = on_test_batch_end = _timed_event
    on_predict_start = on_predict_end = on_predict_batch_start = on_predict_batch_end = _timed_event
    on_train_start = teardown = _timed_event

    # -- monitoring ----------------------------------------------------------------------------------------
    def _before(self, hook_name: str, hook_impls: Any, kwargs: Any) -> None:
        now = time.perf_counter()
        self._stack.append(now)
        if self._in_setup and hook_name in _SETUP_ENDS:
            self._add(self._phases, SETUP_PHASE, now - self._t0)
            self._in_setup = False
        phase = _OPENS.get(hook_name)
        if phase is not None and self._counted(phase):
            self._open[phase] = now
        if hook_name == "on_train_batch_start" and self._gap_start is not None:
            self._add(self._phases, DATA_PHASE, now - self._gap_start - self._gap_excluded)
            self._gap_start = None

    def _after(self, outcome: Any, hook_name: str, hook_impls: Any, kwargs: Any) -> None:
        now = time.perf_counter()
        start = self._stack.pop() if self._stack else now
        self._add(self._hooks, hook_name, now - start)
        phase = _CLOSES.get(hook_name)
        if phase is not None:
            opened = self._open.pop(phase, None)
            if opened is not None:
                self._add(self._phases, phase, now - opened)
                if phase == "validation" and self._gap_start is not None:
                    self._gap_excluded += now - opened
        if hook_name in ("on_train_epoch_start", "on_train_batch_end"):
            self._gap_start, self._gap_excluded = now, 0.0
        elif hook_name == "on_train_epoch_end":
            self._gap_start = None
        if hook_name == "teardown" and not self._stack:
            self._finish()

    def _counted(self, phase: str) -> bool:
        return not (phase in _IN_SANITY and self._trainer is not None and self._trainer.sanity_checking)

    @staticmethod
    def _add(table: dict[str, list[float]], name: str, seconds: float) -> None:
        row = table.get(name)
        if row is None:
            table[name] = [1, seconds, seconds]
        else:
            row[0] += 1
            row[1] += seconds
            if seconds > row[2]:
                row[2] = seconds

    # -- the summary ---------------------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
        trainer = self._trainer
        if trainer is None:
            return
        total = time.perf_counter() - self._t0
        fn = trainer.state.get("fn") or "run"
        order = [SETUP_PHASE] + [name for _, _, name in PHASES]
        order.insert(order.index("train batch"), DATA_PHASE)
        phases = {fn: {"calls": 1, "total_s": total, "max_s": total}}
        for name in sorted(self._phases, key=order.index):
            calls, seconds, most = self._phases[name]
            phases[name] = {"calls": int(calls), "total_s": seconds, "max_s": most}
        hooks = {name: {"calls": int(c), "total_s": s, "max_s": m}
                 for name, (c, s, m) in sorted(self._hooks.items(), key=lambda kv: -kv[1][1])}
        self.summary = {"fn": fn, "total_s": total, "phases": phases, "hooks": hooks}
        text = self.format(self.summary)
        self.path = output_path(trainer, self.dirpath, self.filename, ".txt")
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        with open(self.path[:-4] + ".json", "w", encoding="utf-8") as f:
            json.dump(self.summary, f, indent=1)
        if self.print_summary and trainer.is_global_zero:
            print(text, file=sys.stdout, flush=True)

    @staticmethod
    def format(summary: dict[str, Any]) -> str:
        """The summary as the table that is printed and written."""
        total = summary["total_s"] or 1e-12
        lines = [f"Profile of {summary['fn']} ({summary['total_s']:.3f} s), profiler.simple",
                 f"{'phase':34} {'calls':>8} {'total s':>10} {'mean ms':>10} {'max ms':>10} {'% of run':>9}"]
        for name, row in summary["phases"].items():
            lines.append(f"{name:34} {row['calls']:8d} {row['total_s']:10.3f} "
                         f"{row['total_s'] / row['calls'] * 1e3:10.3f} {row['max_s'] * 1e3:10.3f} "
                         f"{row['total_s'] / total * 100:9.1f}")
        lines.append("")
        lines.append(f"{'hook (time includes nested calls)':34} {'calls':>8} {'total s':>10} {'mean us':>10} "
                     f"{'max us':>10} {'% of run':>9}")
        for name, row in summary["hooks"].items():
            lines.append(f"{name:34} {row['calls']:8d} {row['total_s']:10.3f} "
                         f"{row['total_s'] / row['calls'] * 1e6:10.1f} {row['max_s'] * 1e6:10.1f} "
                         f"{row['total_s'] / total * 100:9.1f}")
        return "\n".join(lines)
