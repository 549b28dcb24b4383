"""Per-step overhead of ember against a raw PyTorch loop, on the overhead-bound tiny MLP, one feature at a time.

    python benchmarks/overhead.py [--steps 1000] [--repeats 9] [--clock cpu]

The focused companion of ``python -m benchmarks`` (same workload, loops and statistics, see
``benchmarks/harness.py``): a 32-64-10 MLP with AdamW on batches of 32, one thread, runs interleaved with the
raw loop. Rows: ``nothing on`` (every optional Trainer feature off); ``+1 empty hook plugin`` (a plugin
implementing ``on_train_batch_start``: what a hook with one implementation costs); ``+log every step``
(``self.log`` of the loss with ``prog_bar=True``); ``+progress bar``, ``+csv logger``, each with the per-step
log on; ``defaults on``; ``bf16-mixed`` against a raw loop under ``torch.autocast``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember  # noqa: E402
from benchmarks import frameworks, harness, workloads  # noqa: E402


class EmptyHook:
    @ember.hookimpl
    def on_train_batch_start(self) -> None:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=workloads.TINY_STEPS)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--clock", choices=sorted(harness.CLOCKS), default="wall")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    clock = harness.CLOCKS[args.clock]
    w = workloads.tiny(steps=args.steps)

    def ember_with(log_steps: bool = False, **kwargs: Any) -> harness.Run:
        def run() -> float:
            return frameworks.ember_run(w, clock, defaults=False, log_steps=log_steps, **kwargs)
        return run

    print(f"ember {ember.__version__} on {harness.machine()}")
    print(f"clock: {args.clock}; 1 thread; {args.repeats} interleaved rounds per row")
    raw = frameworks.build("raw", w, clock)
    rows = [
        ("nothing on", ember_with()),
        ("+1 empty hook plugin", ember_with(plugins=[EmptyHook()])),
        ("+log every step", ember_with(log_steps=True)),
        ("+log every step +progress bar", ember_with(log_steps=True, enable_progress_bar=True)),
        ("+log every step +csv logger", ember_with(log_steps=True, logger=True)),
        ("defaults on", frameworks.build("ember+defaults", w, clock)),
    ]
    groups = [harness.interleave(raw, rows, w.steps(), args.repeats, progress=sys.stderr)]
    bf16 = harness.interleave(lambda: workloads.raw_run(w, clock, autocast=torch.bfloat16),
                              [("bf16-mixed", ember_with(precision="bf16-mixed"))], w.steps(), args.repeats,
                              progress=sys.stderr, base_label="raw (autocast bf16)")
    groups[0] = harness.Group(f"{w.title}, {w.steps()} steps", groups[0].baseline, groups[0].samples)
    groups.append(harness.Group("under bf16 autocast", bf16.baseline, bf16.samples))
    print(file=sys.stderr)
    print(harness.format_table(groups))


if __name__ == "__main__":
    main()
