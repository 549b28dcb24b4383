"""``torch.compile`` under ember: a compiled network trained by ember against the raw loop over the same
compiled network. Compilation happens in the warm-up run (each loop compiles its own copy once); the timed
runs reuse the compiled code, as a long training run would."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks import frameworks, workloads
from benchmarks.harness import Group, interleave


def compiled_group(clock: Any, repeats: int, steps: int = 500, loops: list[str] | None = None) -> Group:
    w = workloads.tiny(steps=steps)
    wanted = loops or ["ember", "ember+defaults"]
    raw_net = torch.compile(w.make_net())
    runs = []
    for loop in wanted:
        net = torch.compile(w.make_net())
        if loop.startswith("ember"):
            runs.append((f"{loop} (compiled)", _ember(w, clock, loop, net)))
        elif loop.startswith("lightning"):
            runs.append((f"{loop} (compiled)", _lightning(w, clock, loop, net)))
    group = interleave(lambda: workloads.raw_run(w, clock, net=raw_net), runs, w.steps(), repeats,
                       base_label="raw (compiled)")
    return Group(f"torch.compile: {w.title}, {w.steps()} steps", group.baseline, group.samples)


def _ember(w: workloads.Workload, clock: Any, loop: str, net: torch.nn.Module) -> Any:
    return lambda: frameworks.ember_run(w, clock, defaults=loop.endswith("defaults"), net=net)


def _lightning(w: workloads.Workload, clock: Any, loop: str, net: torch.nn.Module) -> Any:
    return lambda: frameworks.lightning_run(w, clock, defaults=loop.endswith("defaults"), net=net)
