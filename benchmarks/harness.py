"""Timing: interleaved runs against a baseline, paired statistics, and the table.

For each compared loop, every round runs the baseline and then the loop (A B A B ...), so that a machine
that drifts (thermal limits, another process) hits both alike. Per loop the table shows the per-step time
(median, and min-max over the rounds), the overhead in microseconds per step (the median of the paired
differences: each run minus the baseline run just before it) and the ratio (the median of the paired
ratios). ``ratio of mins`` compares the fastest run of each: on a busy machine, the best estimate of what a
loop costs when nothing else interferes.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

import attrs

Run = Callable[[], float]

#: ``wall``: elapsed time; ``cpu``: the process's CPU time (every thread); ``thread``: the CPU time of the thread
#: that trains (what a step loop pays; work a framework moves to a background thread, such as a checkpoint's
#: write, is left out, so read it next to ``cpu``, which counts it).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time,
                                          "thread": time.thread_time}


class NullTerminal(io.TextIOBase):
    """Swallows output while claiming to be a terminal, so progress bars render as they would for a user
    watching, without the cost of a real terminal."""

    def write(self, s: str) -> int:
        return len(s)

    def isatty(self) -> bool:
        return True

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    sink = NullTerminal()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


@attrs.frozen
class Sample:
    """One loop's timed runs, in seconds per step, with the baseline runs paired with them."""

    label: str
    times: list[float]
    paired_base: list[float]
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def overhead(self) -> float:
        return statistics.median([t - b for t, b in zip(self.times, self.paired_base)])

    def ratio(self) -> float:
        return statistics.median([t / b for t, b in zip(self.times, self.paired_base)])

    def ratio_of_mins(self) -> float:
        return min(self.times) / min(self.paired_base)


@attrs.frozen
class Group:
    """One workload: its baseline and the loops compared with it."""

    title: str
    baseline: Sample
    samples: list[Sample]
    #: Steps per epoch, for workloads of several epochs: the table then shows the overhead per epoch too.
    steps_per_epoch: int = 0


def interleave(baseline: Run, loops: Sequence[tuple[str, Run]], steps: int, repeats: int,
               warmup: int = 1, progress: TextIO | None = None, base_label: str = "raw") -> Group:
    """Time ``baseline`` and each loop ``repeats`` times, interleaved; per-step seconds."""
    for _ in range(warmup):
        with silenced():
            baseline()
            for _, run in loops:
                run()
    base_all: list[float] = []
    times: dict[str, list[float]] = {label: [] for label, _ in loops}
    paired: dict[str, list[float]] = {label: [] for label, _ in loops}
    for r in range(repeats):
        order = list(loops[r % len(loops):]) + list(loops[:r % len(loops)]) if loops else []
        for label, run in order:
            with silenced():
                b = baseline() / steps
                t = run() / steps
            base_all.append(b)
            times[label].append(t)
            paired[label].append(b)
        if progress is not None:
            progress.write(".")
            progress.flush()
    if not loops:  # the baseline alone
        for _ in range(repeats):
            with silenced():
                base_all.append(baseline() / steps)
    base = Sample(base_label, base_all, base_all)
    return Group("", base, [Sample(label, times[label], paired[label]) for label, _ in loops])


def count_calls(run: Run) -> int:
    """Python function calls (and calls into C functions) made by one run, counted by cProfile: exact, so
    unlike a time it does not move with the machine's load."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    with silenced():
        profile.enable()
        try:
            run()
        finally:
            profile.disable()
    return sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]


def marginal_calls(few: Run, many: Run, units: int) -> float:
    """Calls per unit of work: ``many`` and ``few`` are the same run with ``units`` more units (steps, epochs)
    in ``many``; a warm-up run of ``few`` first, so that first-run imports and caches are not counted, and the
    difference leaves set-up out."""
    with silenced():
        few()
    return (count_calls(many) - count_calls(few)) / units


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def format_table(groups: Sequence[Group], unit: str = "us/step") -> str:
    """One table: per-step time median (min-max), overhead and ratios against each group's baseline."""
    head = f"{'workload / loop':44} {unit + ' median (min-max)':>32} {'overhead us':>12} {'ratio':>7} {'ratio of mins':>14}"
    epochs = any(g.steps_per_epoch for g in groups)
    head += f" {'overhead ms/epoch':>18}" if epochs else ""
    lines = [head, "-" * len(head)]
    for g in groups:
        lines.append(g.title)
        b = g.baseline
        blank = f" {'':18}" if g.steps_per_epoch else ""
        lines.append(f"  {b.label:42} {_spread(b.times):>32} {'':>12} {'1.000':>7} {'1.000':>14}"
                     + (f"{blank}  {b.note}" if b.note else ""))
        for s in g.samples:
            per_epoch = f" {s.overhead() * g.steps_per_epoch * 1e3:18.2f}" if g.steps_per_epoch else ""
            lines.append(f"  {s.label:42} {_spread(s.times):>32} {us(s.overhead()):>12} {s.ratio():7.3f} "
                         f"{s.ratio_of_mins():14.3f}{per_epoch}" + (f"  {s.note}" if s.note else ""))
    return "\n".join(lines)


def _spread(times: Sequence[float]) -> str:
    return f"{us(statistics.median(times))} ({us(min(times))}-{us(max(times))})"


def machine() -> str:
    """CPU model, cores, torch and Python versions: the line every table is printed under."""
    import platform

    import torch

    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    gpu = ""
    if torch.cuda.is_available():
        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    return (f"{cpu}, {os.cpu_count()} cores{gpu}; torch {torch.__version__}, Python {platform.python_version()}, "
            f"{sys.platform}")


def stats(values: Sequence[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
