"""Time spent inside named functions during fits with the defaults: where a short epoch's time goes, function by
function, as ``python -m benchmarks.instructions --inside`` counts the instructions.

    python -m benchmarks.inside_time MODULE:FUNCTION [MODULE:CLASS.METHOD ...] [--workload short] [--fits 5]
        [--clock wall|thread]

Each named function is wrapped as ``--inside`` wraps it (:class:`benchmarks.instructions.Inside`: the clock runs
from the outermost call's start to its return, a recursive or nested call of the same function counted once).
One fit of one epoch runs first, not timed (imports, first-call caches), then ``--fits`` fits of the workload with
ember's defaults, the progress bar drawing as in the ``steps`` section (``min_interval`` 0.1 s, on a stand-in
terminal). It prints, per function, the calls per fit, the median and the total per call, and the time per epoch
and per training step (calls per fit, and the times, are what one fit averages).

``--clock wall`` (the default) is ``time.perf_counter``; ``--clock thread`` the calling thread's CPU time, which
leaves out waiting (for the interpreter lock, for a write). A function that runs on the writer thread is timed
on that thread. Name functions that run on one thread at a time: a call on one thread while another thread is
inside the same function counts as nested.

The time around a function is not free: about a microsecond per call for the wrapper, so read functions called
every step with that in mind. Run on a quiet machine, as for any timing (docs/performance.md).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import statistics
import sys
import time
from collections.abc import Callable, Iterator

from benchmarks import frameworks, harness, workloads
from benchmarks.instructions import WORKLOADS, Inside, make_workload, resolve

_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}


class Stopwatch:
    """What :class:`Inside` switches on and off around each outermost call: keeps each call's duration."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.durations: list[float] = []
        self._started: float | None = None

    def toggle(self) -> None:
        now = self.clock()
        if self._started is None:
            self._started = now
        else:
            self.durations.append(now - self._started)
            self._started = None


@contextlib.contextmanager
def timed(specs: list[str], clock: Callable[[], float]) -> Iterator[dict[str, Stopwatch]]:
    """Each function of ``specs`` timed with ``clock`` for the duration; the stopwatches by spec."""
    watches = {spec: Stopwatch(clock) for spec in specs}
    with contextlib.ExitStack() as stack:
        for spec, watch in watches.items():
            owner, name = resolve(spec)
            stack.enter_context(Inside(inspect.getattr_static(owner, name), watch).installed(owner, name))
        yield watches


def format_table(watches: dict[str, Stopwatch], fits: int, epochs: int, steps: int) -> str:
    width = max(len("function"), *map(len, watches)) + 2
    lines = [f"{'function':<{width}} {'calls/fit':>9} {'median us':>10} {'us/epoch':>9} {'us/step':>8}"]
    for spec, watch in watches.items():
        d = watch.durations
        median = f"{statistics.median(d) * 1e6:,.1f}" if d else "-"
        total = sum(d) / fits
        lines.append(f"{spec:<{width}} {len(d) / fits:>9,.1f} {median:>10} {total / epochs * 1e6:>9,.1f} "
                     f"{total / steps * 1e6:>8,.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.inside_time", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("functions", nargs="+", metavar="MODULE:FUNCTION")
    p.add_argument("--workload", choices=WORKLOADS, default="short")
    p.add_argument("--fits", type=int, default=5, help="fits timed (default 5)")
    p.add_argument("--clock", choices=sorted(_CLOCKS), default="wall")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    torch.set_num_threads(1)
    bar = TQDMProgressBar(min_interval=0.1)

    def fit(w: workloads.Workload) -> None:
        with harness.silenced():
            frameworks.ember_run(w, lambda: 0.0, defaults=True, callbacks=[bar])

    fit(make_workload(args.workload, 1))
    w = make_workload(args.workload, None)
    with timed(args.functions, _CLOCKS[args.clock]) as watches:
        for _ in range(args.fits):
            fit(w)
    print(f"{w.title}; {args.fits} fits, clock: {args.clock}")
    print(format_table(watches, args.fits, w.epochs, w.steps()))


if __name__ == "__main__":
    main()
