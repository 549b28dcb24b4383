"""What a process pays before and around training, measured in fresh subprocesses.

* import time: ``import torch``, then what ``import ember`` (and Lightning, ignite) adds on top of it.
* time to first step: from just before the process is started to the end of the first optimizer step
  (interpreter start, imports, data, model, Trainer, everything ``fit`` does before its first step).
* peak memory: the process's peak resident set size after training the digits MLP (``VmHWM`` on Linux,
  ``ru_maxrss`` elsewhere).

Each figure is the median over several fresh processes, after one warm-up process that fills a bytecode cache
(outside the source tree): imports are timed from compiled bytecode, as for an installed package. Child
processes are this module run with ``python -m benchmarks.startup child ...``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IMPORT_SNIPPET = """
import sys, time
clock = time.process_time if sys.argv[1] == "cpu" else time.perf_counter
t0 = clock()
import torch
t1 = clock()
for name in sys.argv[2:]:
    __import__(name)
t2 = clock()
print(t1 - t0, t2 - t1)
"""


_pycache: list[str] = []


def _bytecode_cache() -> str:
    """A bytecode cache for the child processes, outside the source tree: they import from compiled
    bytecode, as an installed package does, even where ``PYTHONDONTWRITEBYTECODE`` is set."""
    if not _pycache:
        path = tempfile.mkdtemp(prefix="ember-bench-pycache-")
        atexit.register(shutil.rmtree, path, True)
        _pycache.append(path)
    return _pycache[0]


def _python(args: list[str], env: dict[str, str] | None = None) -> str:
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("PYTHONPATH", ROOT)
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)
    full_env["PYTHONPYCACHEPREFIX"] = _bytecode_cache()
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=full_env,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark subprocess {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def import_times(modules: list[str], repeats: int, clock: str = "wall") -> dict[str, Any]:
    """Seconds for ``import torch`` and what each of ``modules`` adds after it, one fresh process each."""
    torch_s: list[float] = []
    added: dict[str, list[float]] = {m: [] for m in modules}
    _python(["-c", IMPORT_SNIPPET, clock, *modules])  # fills the bytecode cache
    for _ in range(repeats):
        for module in modules:  # interleaved, each in a fresh interpreter
            t_torch, t_mod = map(float, _python(["-c", IMPORT_SNIPPET, clock, module]).split())
            torch_s.append(t_torch)
            added[module].append(t_mod)
    return {"torch": torch_s, **added}


def first_step_times(loops: list[str], repeats: int, clock: str = "wall") -> dict[str, list[float]]:
    """Seconds from process start to the end of the first optimizer step, per loop: elapsed from just before
    the process is started (``wall``), or the CPU time the process has used by then (``cpu``)."""
    out: dict[str, list[float]] = {loop: [] for loop in loops}
    for loop in loops:  # warm-up: fills the bytecode cache
        _python(["-m", "benchmarks.startup", "child", "first-step", loop])
    for _ in range(repeats):
        for loop in loops:
            start = time.time()
            wall, cpu = map(float, _python(["-m", "benchmarks.startup", "child", "first-step", loop]).split()[-2:])
            out[loop].append(cpu if clock == "cpu" else wall - start)
    return out


def peak_rss(loops: list[str], repeats: int) -> dict[str, list[float]]:
    """Peak RSS in MiB of a process that trains the digits MLP with each loop."""
    out: dict[str, list[float]] = {loop: [] for loop in loops}
    for loop in loops:  # warm-up: compiling bytecode on a first import takes memory too
        _python(["-m", "benchmarks.startup", "child", "rss", loop])
    for _ in range(repeats):
        for loop in loops:
            out[loop].append(float(_python(["-m", "benchmarks.startup", "child", "rss", loop]).split()[-1]))
    return out


# -- children ----------------------------------------------------------------------------------------------
class _FirstStep(Exception):
    """Raised by the stopping callback: the run is over once its first step is."""


def _child_first_step(loop: str) -> None:
    import torch

    torch.set_num_threads(1)
    from benchmarks import workloads  # imports torch only: the raw loop imports nothing of ember

    w = workloads.tiny(steps=50)
    stamp: dict[str, float] = {}

    def done(*args: Any, **kwargs: Any) -> None:
        stamp["t"], stamp["cpu"] = time.time(), time.process_time()
        raise _FirstStep

    if loop == "raw":
        net = w.make_net()
        opt = w.make_optimizer(net)
        train, _ = w.make_data()
        for batch in train:
            loss = workloads.loss_of(net, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            stamp["t"], stamp["cpu"] = time.time(), time.process_time()
            break
    else:
        from benchmarks import frameworks
        from benchmarks.harness import silenced

        try:
            with silenced():
                if loop.startswith("ember"):
                    stop = type("StopAfterFirstStep", (), {"on_train_batch_end": done})()
                    frameworks.ember_run(w, time.perf_counter, defaults=loop.endswith("defaults"), callbacks=[stop])
                elif loop.startswith("lightning"):
                    pl = frameworks.lightning_module()
                    stop = type("StopAfterFirstStep", (pl.Callback,), {"on_train_batch_end": done})()
                    frameworks.lightning_run(w, time.perf_counter, defaults=loop.endswith("defaults"),
                                             callbacks=[stop])
                elif loop == "ignite":
                    frameworks.ignite_run(w, time.perf_counter, on_iteration=done)
                else:
                    raise SystemExit(f"unknown loop {loop!r}")
        except _FirstStep:
            pass
    print(stamp["t"], stamp["cpu"])


def _child_rss(loop: str) -> None:
    import torch

    torch.set_num_threads(1)
    from benchmarks import workloads

    w = workloads.digits(epochs=5)
    if loop == "raw":
        workloads.raw_run(w, time.perf_counter)
    else:
        from benchmarks import frameworks, harness

        with harness.silenced():
            frameworks.build(loop, w, time.perf_counter)()
    print(_peak_rss_mib())


def _peak_rss_mib() -> float:
    """This process's peak resident set size. On Linux, ``VmHWM``: the peak of this process's own memory,
    whereas ``ru_maxrss`` starts from the parent's size when the process was started (Linux carries it over
    ``fork`` and ``exec``), which would hide any difference under the benchmark's own footprint."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB elsewhere


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "child":
        {"first-step": _child_first_step, "rss": _child_rss}[argv[1]](argv[2])
        return
    raise SystemExit("usage: python -m benchmarks (this module runs the suite's child processes)")


if __name__ == "__main__":
    main(sys.argv[1:])
