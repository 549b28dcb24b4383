"""The benchmark suite: ``python -m benchmarks`` from the repository root.

Prints one table: per-step time of each loop against a raw PyTorch loop measured in the same run
(interleaved), for an overhead-bound tiny MLP, the digits MLP, a compute-bound CNN and a ``torch.compile``d
network, then the start-up figures (import time, time to the first step, peak memory) and, on a machine with
a CUDA GPU, a transformer language model under bf16-mixed. PyTorch Lightning and pytorch-ignite are
measured too when installed (``pip install 'ember[bench]'``). ``docs/performance.md`` explains every row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

from benchmarks import frameworks, harness, startup, workloads

SECTIONS = ("steps", "epochs", "compile", "startup", "gpu", "gpu-epochs")
WORKLOADS = ("tiny", "tiny128", "short", "digits", "cnn")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds per loop (default 7)")
    p.add_argument("--quick", action="store_true", help="fewer steps and rounds: a smoke run, not a measurement")
    p.add_argument("--clock", choices=sorted(harness.CLOCKS), default="wall",
                   help="wall: elapsed time (default); cpu: the process's CPU time, steadier on a shared machine; "
                        "thread: the training thread's CPU time (leaves out background checkpoint writes)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for the CPU runs (default 1)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    p.add_argument("--loops", nargs="+", default=None,
                   help=f"loops to compare with raw (default: all installed: {', '.join(frameworks.available_loops()[1:])})")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--json", metavar="PATH", help="also write every sample to PATH as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = harness.CLOCKS[args.clock]
    loops = args.loops or frameworks.available_loops()[1:]
    unknown = [loop for loop in loops if loop not in frameworks.available_loops()]
    if unknown:
        raise SystemExit(f"--loops: {', '.join(unknown)} not available; installed: "
                         f"{', '.join(frameworks.available_loops()[1:])}")
    repeats = 2 if args.quick else args.repeats
    out = sys.stdout
    import ember

    print(f"ember {ember.__version__} benchmarks on {harness.machine()}", file=out)
    print(f"clock: {args.clock}; {args.threads} thread(s); {repeats} interleaved rounds per loop; "
          f"loops: raw, {', '.join(loops)}", file=out)
    results: dict[str, Any] = {"machine": harness.machine(), "clock": args.clock, "threads": args.threads,
                               "repeats": repeats, "groups": [], "startup": {}}
    groups: list[harness.Group] = []
    skipped: list[str] = []
    calls: dict[str, float] = {}
    epoch_calls: dict[str, float] = {}

    def note(msg: str) -> None:
        print(msg, file=sys.stderr, end="", flush=True)

    if "steps" in args.only:
        for key in args.workloads:
            w = _workload(key, args.quick)
            note(f"[{key}] ")
            started = time.perf_counter()
            g = harness.interleave(frameworks.build("raw", w, clock),
                                   [(loop, frameworks.build(loop, w, clock)) for loop in loops],
                                   w.steps(), repeats, progress=sys.stderr)
            per_epoch = w.steps() // w.epochs if w.epochs > 1 else 0
            groups.append(harness.Group(f"{w.title}, {w.steps()} steps", g.baseline, g.samples, per_epoch))
            note(f" {time.perf_counter() - started:.0f}s\n")
    if "epochs" in args.only:
        from benchmarks.epochs import calls_per_epoch, epoch_group

        note("[epochs] ")
        groups.append(epoch_group(clock, repeats, epochs=4 if args.quick else 16, progress=sys.stderr))
        note(" [calls] ")
        epoch_calls = calls_per_epoch(clock, (2, 4) if args.quick else (4, 12))
        results["calls_per_epoch"] = epoch_calls
        note("\n")
    if "compile" in args.only:
        from benchmarks.compiled import compiled_group

        note("[compile] ")
        compile_loops = [loop for loop in loops if loop.startswith(("ember", "lightning"))]
        try:
            groups.append(compiled_group(clock, repeats, steps=200 if args.quick else 500, loops=compile_loops))
        except Exception as exc:  # e.g. no C++ compiler for inductor on this machine
            skipped.append(f"torch.compile: skipped ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
        note("\n")
    if "gpu" in args.only:
        from benchmarks.gpu import LMConfig, gpu_groups

        note("[gpu] ")
        gpu_loops = [loop for loop in loops if loop.startswith(("ember", "lightning"))]
        config = LMConfig(steps=20, epochs=2) if args.quick else LMConfig()
        groups += gpu_groups(harness.CLOCKS["wall"], repeats, gpu_loops, config)
        note("\n")
    if "gpu-epochs" in args.only:
        from benchmarks.gpu import LMConfig, gpu_epoch_group

        note("[gpu-epochs] ")
        groups += gpu_epoch_group(harness.CLOCKS["wall"], repeats, LMConfig(steps=20, epochs=2) if args.quick
                                  else LMConfig())
        note("\n")
    if "steps" in args.only and "tiny" in args.workloads:
        note("[calls] ")
        calls = calls_per_step(loops, clock, (50, 100) if args.quick else (200, 400))
        results["calls_per_step"] = calls
        note("\n")
    print(file=out)
    print(harness.format_table(groups), file=out)
    if calls:
        raw = calls["raw"]
        print(f"Python calls per training step (exact, cProfile; tiny MLP, marginal per step): raw {raw:.1f}; "
              + ", ".join(f"{loop} +{n - raw:.1f}" for loop, n in calls.items() if loop != "raw"), file=out)
    if epoch_calls:
        from benchmarks.epochs import format_calls

        print(format_calls(epoch_calls), file=out)
    if {"gpu", "gpu-epochs"} & set(args.only) and not torch.cuda.is_available():
        skipped.append("GPU: skipped (no CUDA device)")
    for line in skipped:
        print(line, file=out)
    for g in groups:
        results["groups"].append({"title": g.title, "baseline": g.baseline.times,
                                  "loops": {s.label: {"times": s.times, "paired_baseline": s.paired_base}
                                            for s in g.samples}})
    if "startup" in args.only:
        note("[startup] ")
        results["startup"] = run_startup(loops, 3 if args.quick else 5, "cpu" if args.clock == "thread" else args.clock, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def calls_per_step(loops: list[str], clock: Any, steps: tuple[int, int] = (200, 400)) -> dict[str, float]:
    """Function calls per training step of each loop: the difference between two runs of the tiny MLP (400 and
    200 steps; fewer for a smoke run), so that set-up is not counted."""
    short, long = workloads.tiny(steps=steps[0]), workloads.tiny(steps=steps[1])
    return {loop: harness.marginal_calls(frameworks.build(loop, short, clock), frameworks.build(loop, long, clock),
                                         long.steps() - short.steps())
            for loop in ["raw", *loops]}


def _workload(key: str, quick: bool) -> workloads.Workload:
    if key == "tiny":
        return workloads.tiny(steps=100 if quick else workloads.TINY_STEPS)
    if key == "tiny128":
        return workloads.tiny_epochs(epochs=2 if quick else 8)
    if key == "short":
        return workloads.short_epochs(epochs=4 if quick else 16)
    if key == "digits":
        return workloads.digits(epochs=3 if quick else 10)
    return workloads.cnn(steps=4 if quick else 64)


def run_startup(loops: list[str], repeats: int, clock: str, out: Any) -> dict[str, Any]:
    modules = ["ember"]
    pl = frameworks.lightning_module()
    if pl is not None:
        modules.append(pl.__name__.split(".")[0])
    if frameworks.ignite_available():
        modules.append("ignite")
    imports = startup.import_times(modules, repeats, clock)
    first = startup.first_step_times(["raw", *loops], repeats, clock)
    rss = startup.peak_rss(["raw", *loops], 2)
    print(file=sys.stderr)
    med = statistics.median
    print(file=out)
    print(f"start-up ({clock} clock), {repeats} fresh processes each (median, min-max); peak RSS: 2 each", file=out)
    t = imports["torch"]
    print(f"  {'import torch':50} {med(t):8.3f} s ({min(t):.3f}-{max(t):.3f})", file=out)
    for m in modules:
        v = imports[m]
        print(f"  {'import ' + m + ' after torch adds':50} {med(v):8.3f} s ({min(v):.3f}-{max(v):.3f})", file=out)
    base_first = med(first["raw"])
    for loop, v in first.items():
        extra = "" if loop == "raw" else f"  {med(v) - base_first:+.3f} s"
        print(f"  {'process start to first step, ' + loop:50} {med(v):8.3f} s ({min(v):.3f}-{max(v):.3f}){extra}",
              file=out)
    base_rss = med(rss["raw"])
    for loop, v in rss.items():
        extra = "" if loop == "raw" else f"  {med(v) - base_rss:+.1f} MiB"
        print(f"  {'peak RSS (digits, 5 epochs), ' + loop:50} {med(v):8.1f} MiB ({min(v):.1f}-{max(v):.1f}){extra}",
              file=out)
    return {"imports": imports, "first_step": first, "peak_rss_mib": rss}


if __name__ == "__main__":
    main()
