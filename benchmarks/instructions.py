"""Overhead as instructions executed, counted by valgrind: the same ratios as ``python -m benchmarks``, without the
noise of a shared machine.

    python -m benchmarks.instructions [--loops ember ember+defaults] [--workloads tiny128 short digits]

On a virtual machine whose cores other jobs share, the wall clock of the same run moves by 30-60% and the ratio to
the raw loop by up to 0.2 from one run to the next, which is more than the differences being measured. An
instruction count does not move: this script runs itself under valgrind's ``callgrind`` tool and counts the
instructions of each loop's fit (the raw PyTorch loop, ember, ember with its defaults), on each workload of
:mod:`benchmarks.workloads`, every thread of the process included (a background checkpoint write counts, as it
does on the ``cpu`` clock). What is counted is what the other sections time (from ``fit()`` to its return, the
Trainer and the model made before). Each loop first runs a one-epoch fit uncounted (imports, first-call caches),
then the workload's fit counted.
It prints instructions per step and the ratio to the raw loop.

``--inside module:Class.method ...`` counts instead the instructions spent inside each named function (its callees
included) during one fit of ``ember+defaults`` on the short epochs (or the first of ``--workloads``): where a fit's overhead goes, without the
distortion of a Python profiler. Each call of a named function costs about ten thousand instructions of ``ctypes``
calls that are counted with it: read per-call figures of functions called every step with that in mind.

An instruction is not a nanosecond: Python's interpreter and torch's kernels retire instructions at different
rates, so the ratio is a steady proxy for the overhead, not the wall-clock ratio itself; use it to see whether a
change moves the overhead, and the wall clock on a quiet machine for what a user sees. On the short epochs the
raw loop's kernels retire about three times as many instructions per nanosecond as ember's added Python, so a
ratio's excess over 1 reads about three times smaller here than in time (1.107 counted against 1.33 timed;
docs/performance.md); a target stated in time is not met by a count below it.

What follows a clock behaves as in a native run: under valgrind a fit runs about 50 times slower, so the progress
bar (which renders at most every ``min_interval`` seconds) is given ``min_interval`` times ``--slowdown`` (50 by
default) to render as often per step as it does natively.

Needs ``valgrind`` (with its ``valgrind/callgrind.h`` header) and a C compiler: a small library that marks the
start and the end of each counted fit is compiled on the fly. A full run takes about 20 minutes of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_MARKS_C = r"""
#include <valgrind/callgrind.h>
void mark_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void mark_stop(const char *name) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(name); }
void zero(void) { CALLGRIND_ZERO_STATS; }
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
int under_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""

_INNER = "EMBER_INSTRUCTIONS_MARKS"  # the compiled library's path, set for the run under valgrind
LOOPS = ("ember", "ember+defaults")
WORKLOADS = ("tiny128", "short", "digits")


def missing_tools() -> list[str]:
    """What this machine lacks to count instructions (empty when nothing)."""
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if not any(Path(d, "valgrind", "callgrind.h").is_file() for d in ("/usr/include", "/usr/local/include")):
        missing.append("valgrind/callgrind.h (the valgrind development headers)")
    return missing


def compile_marks(folder: str) -> str:
    """The marking library, compiled into ``folder``; its path."""
    source, library = os.path.join(folder, "marks.c"), os.path.join(folder, "marks.so")
    Path(source).write_text(_MARKS_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def read_dumps(folder: str) -> dict[str, int]:
    """``{name: instructions}`` from the callgrind dumps in ``folder`` made by ``mark_stop(name)``."""
    counts: dict[str, int] = {}
    for path in sorted(Path(folder).glob("callgrind.out*")):
        text = path.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: (.+)$", text, re.MULTILINE)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
        if trigger and total:
            counts[trigger.group(1).strip()] = int(total.group(1))
    return counts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS), help="loops compared with raw")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help="benchmarks.workloads to run")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs of each workload (default: the workload's own); fewer for a quick look")
    p.add_argument("--epoch-rows", action="store_true",
                   help="count the rows of `python -m benchmarks --only epochs` instead (short epochs, each default "
                        "switched off in turn; a writer process's own instructions are not counted)")
    p.add_argument("--inside", nargs="+", metavar="MODULE:FUNCTION", default=[],
                   help="count only inside these functions (e.g. ember.core.loop.rng:capture, "
                        "ember.core.checkpointing.checkpoint:Checkpointing.build) during an ember+defaults fit")
    p.add_argument("--slowdown", type=float, default=50.0, help="how much slower a fit runs under valgrind")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.environ.get(_INNER):
        _count(args)
        return
    missing = missing_tools()
    if missing:
        raise SystemExit(f"python -m benchmarks.instructions needs {', '.join(missing)}; install valgrind (for "
                         "example `apt-get install valgrind`) and a C compiler, or use `python -m benchmarks`.")
    with tempfile.TemporaryDirectory(prefix="ember-instructions-") as folder:
        env = {**os.environ, _INNER: compile_marks(folder), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                   f"--callgrind-out-file={folder}/callgrind.out", sys.executable, "-m", "benchmarks.instructions",
                   *(argv if argv is not None else sys.argv[1:])]
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"the run under valgrind failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        sys.stdout.write(run.stdout)
        if args.inside:
            key = _inside_workload(args)
            w = make_workload(key, args.epochs)
            print(format_inside(read_dumps(folder), args.inside, w.epochs, w.steps(), key))
            return
        print(format_table(read_dumps(folder), _steps(args), _loops(args), _counted_workloads(args)))


def _steps(args: argparse.Namespace) -> dict[str, int]:
    return {key: make_workload(key, args.epochs).steps() for key in _counted_workloads(args)}


def _counted_workloads(args: argparse.Namespace) -> list[str]:
    return ["short"] if args.epoch_rows else args.workloads


def _loops(args: argparse.Namespace) -> list[str]:
    if args.epoch_rows:
        from benchmarks import epochs

        return [label for label, _, _ in epochs.row_args()]
    return args.loops


def make_workload(key: str, epochs: int | None) -> Any:
    """The workload ``key`` of :mod:`benchmarks.workloads`, with ``epochs`` epochs (None: its own number)."""
    from benchmarks import workloads

    makers: dict[str, Callable[..., Any]] = {"tiny": workloads.tiny, "tiny128": workloads.tiny_epochs,
                                             "short": workloads.short_epochs, "digits": workloads.digits}
    if key not in makers:
        raise SystemExit(f"--workloads: {key!r} is not one of {', '.join(makers)}")
    if key == "tiny" or epochs is None:
        return makers[key]()
    return makers[key](epochs=epochs)


class _Marks:
    """A clock for the benchmark runs (they call it at the start and at the end of what they time) that marks the
    start and the end of the counted stretch instead: the same stretch the other sections time."""

    def __init__(self, library: Any) -> None:
        self.library = library
        self.name: str | None = None
        self._open = False

    def __call__(self) -> float:
        if self.name is not None:
            if not self._open:
                self.library.mark_start()
            else:
                self.library.mark_stop(self.name.encode())
            self._open = not self._open
        return 0.0


def _count(args: argparse.Namespace) -> None:
    """Under valgrind: each loop of each workload once uncounted, then once with its timed stretch counted."""
    import torch

    from benchmarks import frameworks, harness
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    torch.set_num_threads(1)
    library = ctypes.CDLL(os.environ[_INNER])
    if not library.under_valgrind():
        raise SystemExit("benchmarks.instructions: the counting run must run under valgrind")
    clock = _Marks(library)
    bar = TQDMProgressBar(min_interval=0.1 * args.slowdown)
    if args.inside:
        _count_inside(args, library, bar)
        return
    for key in _counted_workloads(args):
        counted, warm_up = make_workload(key, args.epochs), make_workload(key, 1)
        for name, run in (("raw", None), *_runs(args, bar)):
            for w, counting in ((warm_up, False), (counted, True)):  # first uncounted: imports, first-call caches
                clock.name = f"{key}/{name}" if counting else None
                with harness.silenced():
                    if run is None:
                        frameworks.raw_run(w, clock)
                    else:
                        run(w, clock)
        print(f"[{key}] counted", file=sys.stderr, flush=True)


def _runs(args: argparse.Namespace, bar: Any) -> list[tuple[str, Callable[[Any, Any], float]]]:
    """``(name, run(workload, clock))`` of each loop counted beside the raw loop."""
    from benchmarks import epochs, frameworks

    def ember(defaults: bool, kwargs: dict[str, Any]) -> Callable[[Any, Any], float]:
        if defaults and kwargs.get("enable_progress_bar", True):  # the bar told how much slower it runs
            kwargs = {"callbacks": [bar], **kwargs}
        return lambda w, clock: frameworks.ember_run(w, clock, defaults=defaults, **kwargs)

    if args.epoch_rows:
        return [(label, ember(defaults, kwargs)) for label, defaults, kwargs in epochs.row_args()]
    return [(name, ember(name == "ember+defaults", {})) for name in args.loops]


def _count_inside(args: argparse.Namespace, library: Any, bar: Any) -> None:
    """Under valgrind: for each function named, one ember+defaults fit with the counting on only inside it."""
    from benchmarks import frameworks, harness

    key = _inside_workload(args)
    counted = make_workload(key, args.epochs)

    def fit(w: Any) -> None:
        with harness.silenced():
            frameworks.ember_run(w, lambda: 0.0, defaults=True, callbacks=[bar])

    fit(make_workload(key, 1))  # uncounted: imports, first-call caches
    for spec in args.inside:
        owner, name = resolve(spec)
        counter = Inside(inspect.getattr_static(owner, name), library)
        with counter.installed(owner, name):
            library.zero()
            fit(counted)
            library.dump(f"{spec}|{counter.calls}".encode())


def _inside_workload(args: argparse.Namespace) -> str:
    """The workload ``--inside`` counts: the first of ``--workloads`` when given, else the short epochs."""
    return "short" if args.workloads == list(WORKLOADS) else args.workloads[0]


def resolve(spec: str) -> tuple[Any, str]:
    """``"package.module:Class.method"`` or ``"package.module:function"``: the object holding it and its name."""
    import importlib

    module, _, path = spec.partition(":")
    if not path:
        raise SystemExit(f"--inside {spec!r}: expected MODULE:FUNCTION or MODULE:CLASS.METHOD")
    owner: Any = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    if not hasattr(owner, name):
        raise SystemExit(f"--inside {spec!r}: {owner!r} has no {name!r}")
    return owner, name


class Inside:
    """The wrapper that switches counting on for the outermost call of a function (recursion and nested calls
    count once) and off when it returns or raises; ``calls``: how many calls it saw."""

    def __init__(self, original: Any, library: Any) -> None:
        self.original, self.library = original, library
        self.depth = self.calls = 0

    def wrapper(self) -> Any:
        import functools

        static = isinstance(self.original, staticmethod)
        function = self.original.__func__ if static else self.original

        @functools.wraps(function)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.depth == 0:
                self.library.toggle()
            self.depth += 1
            self.calls += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.library.toggle()

        return staticmethod(counted) if static else counted

    @contextlib.contextmanager
    def installed(self, owner: Any, name: str) -> Iterator[None]:
        """The wrapper in place of ``owner.name`` for the duration; a method ``owner`` inherits is wrapped on
        ``owner`` and removed again afterwards, so that the base class's serves again."""
        inherited = isinstance(owner, type) and name not in vars(owner)
        setattr(owner, name, self.wrapper())
        try:
            yield
        finally:
            if inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, self.original)


def format_inside(counts: dict[str, int], specs: list[str], epochs: int, steps: int, key: str) -> str:
    found = {name.rpartition("|")[0]: (int(name.rpartition("|")[2]), n) for name, n in counts.items()}
    lines = [f"instructions inside each function, one ember+defaults fit of {key} ({epochs} epochs, {steps} steps)",
             f"{'function':<72}{'calls':>7}{'per call':>12}{'per epoch':>13}{'per step':>10}"]
    for spec in specs:
        calls, n = found.get(spec, (0, 0))
        per_call = f"{n / calls:,.0f}" if calls else "-"
        lines.append(f"{spec:<72}{calls:>7}{per_call:>12}{n / epochs:>13,.0f}{n / steps:>10,.0f}")
    return "\n".join(lines)


def format_table(counts: dict[str, int], steps: dict[str, int], loops: list[str], workloads: list[str]) -> str:
    lines = [f"{'workload / loop':<28}{'instructions/step':>20}{'ratio':>9}", "-" * 57]
    for key in workloads:
        base = counts.get(f"{key}/raw")
        lines.append(f"{key} ({steps[key]} steps)")
        for loop in ("raw", *loops):
            n = counts.get(f"{key}/{loop}")
            if n is None:
                lines.append(f"  {loop:<26}{'n/a':>20}")
                continue
            ratio = f"{n / base:9.3f}" if base else f"{'n/a':>9}"
            lines.append(f"  {loop:<26}{n / steps[key]:>20,.0f}{ratio}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
