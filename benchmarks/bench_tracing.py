"""Per-step cost of hook tracing, against a raw PyTorch loop in the same run.

    python benchmarks/bench_tracing.py [--steps 3000] [--repeats 5]

An overhead-bound tiny model (one small linear layer, batches already in memory) trained by: a plain PyTorch
loop; ember with tracing off (``trace=False``, and with ``EMBER_TRACE`` unset); ember tracing into a JSON-lines
file. Prints microseconds per step (best of the repeats, cases interleaved) and each time as a ratio of the raw
loop, then the number of Python function calls per training step (counted with cProfile: exact, unlike times
on a busy machine). Tracing off must cost what ember costs anyway: no monitor is installed and the hook table
keeps its direct calls, so the call count per step is the same as without the feature (run this script with
``PYTHONPATH`` pointing at another ember source tree to compare; cases it does not support print ``n/a``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
import warnings

import attrs
import torch

import ember

FEATURES_OFF = {"enable_progress_bar": False, "logger": False, "enable_model_summary": False,
                "detect_nonfinite_loss": False}


def off_args() -> dict:
    """Switch off the optional features this version of ember has (progress bar, logger files, summary)."""
    names = {f.name for f in attrs.fields(ember.TrainerConfig)}
    try:  # the arguments plugins declare (an older ember keeps them all in TrainerConfig)
        from ember.core.hooks.options import declared_options

        names |= {option.name for option in declared_options()}
    except ImportError:
        pass
    return {k: v for k, v in FEATURES_OFF.items() if k in names}


def make_batches(steps: int, batch: int = 32, features: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, features, generator=g), torch.randint(0, 4, (batch,), generator=g))
            for _ in range(steps)]


class Tiny(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def raw(batches: list) -> float:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def with_ember(batches: list, profile: cProfile.Profile | None = None, **trainer_args) -> float:
    torch.manual_seed(0)
    root = tempfile.mkdtemp(prefix="ember-bench-")
    trainer = ember.Trainer(max_epochs=1, num_sanity_val_steps=0, default_root_dir=root, autoload_plugins=False,
                            **off_args(), **trainer_args)
    model = Tiny()
    times = {}

    class Clock:  # the first and last hooks of the epoch: times the loop, not the set-up
        @ember.hookimpl
        def on_train_epoch_start(self) -> None:
            if profile is not None:
                profile.enable()
            times["start"] = time.perf_counter()

        @ember.hookimpl
        def on_train_epoch_end(self) -> None:
            times["end"] = time.perf_counter()
            if profile is not None:
                profile.disable()

    trainer.extra_plugins.append(("bench.clock", Clock()))
    trainer.fit(model, batches)
    return times["end"] - times["start"]


def calls_per_step(batches: list, **trainer_args) -> float:
    """Python function calls per training step, from the difference between two epoch lengths."""
    counts = []
    for n in (len(batches) // 2, len(batches)):
        profile = cProfile.Profile()
        with_ember(batches[:n], profile=profile, **trainer_args)
        counts.append(pstats.Stats(profile).total_calls)
    return (counts[1] - counts[0]) / (len(batches) - len(batches) // 2)


def supported(**trainer_args) -> bool:
    try:
        ember.Trainer(**trainer_args)
    except ember.ConfigurationError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.pop("EMBER_TRACE", None)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    batches = make_batches(args.steps)
    trace_file = os.path.join(tempfile.mkdtemp(prefix="ember-bench-"), "trace.jsonl")
    configs = {"ember, EMBER_TRACE unset": {}, "ember, trace=False": {"trace": False},
               "ember, trace to a .jsonl file": {"trace": trace_file}}
    configs = {name: kw for name, kw in configs.items() if supported(**kw)}
    cases = {"raw PyTorch loop": lambda: raw(batches)}
    cases.update({name: (lambda kw=kw: with_ember(batches, **kw)) for name, kw in configs.items()})
    for run in cases.values():  # warm-up
        run()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):  # interleaved, so a busy spell on the machine hits every case alike
        for name, run in cases.items():
            samples[name].append(run())
    best = {name: min(times) / args.steps * 1e6 for name, times in samples.items()}
    base = best["raw PyTorch loop"]
    print(f"{args.steps} steps, best of {args.repeats}, torch {torch.__version__}, 1 thread, ember from "
          f"{os.path.dirname(ember.__file__)}")
    lines = sum(1 for _ in open(trace_file)) if os.path.exists(trace_file) else 0
    for name, us in best.items():
        calls = f"{calls_per_step(batches[:400], **configs[name]):6.1f}" if name in configs else "     -"
        print(f"  {name:32s} {us:8.1f} us/step   x{us / base:5.2f} of raw   (+{us - base:6.1f} us)   "
              f"{calls} Python calls/step")
    if lines:
        print(f"  trace file of a traced run: {lines} lines ({lines / args.steps:.1f} per step)")


if __name__ == "__main__":
    main()
