"""Per-step overhead of ember against a raw PyTorch loop, on an overhead-bound tiny MLP.

    python benchmarks/overhead.py [--steps 2000] [--repeats 7]

Both loops train a 32-64-10 MLP with AdamW on batches of 32 drawn from the same DataLoader, one thread.
Runs are interleaved (raw, ember, raw, ember, ...) so that drift of the machine hits both alike; the table
shows medians with min-max, the overhead per step in microseconds and the ratio ember/raw.

Rows: ``ember (nothing on)`` turns off every optional feature the Trainer has (progress bar, logger,
checkpointing, model summary, where present); ``ember (+1 empty hook plugin)`` adds a plugin implementing
``on_train_batch_start``, which shows what a hook with one implementation costs; ``ember (progress bar,
csv logger)`` turns the default progress bar and CSV logger on (writing every 50 steps, into a temporary
folder); ``ember (bf16-mixed)`` compares against a raw loop under ``torch.autocast``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import attrs
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember

FEATURES_OFF = {"enable_progress_bar": False, "logger": False, "enable_checkpointing": False,
                "enable_model_summary": False}


def off_args() -> dict[str, Any]:
    """The Trainer arguments that switch optional features off, for those this version has."""
    names = {f.name for f in attrs.fields(ember.TrainerConfig)}
    return {k: v for k, v in FEATURES_OFF.items() if k in names}


def make_loader(steps: int, batch: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * batch, 32, generator=g)
    y = torch.randint(0, 10, (steps * batch,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)


def make_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


class TinyModule(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class EmptyHook:
    @ember.hookimpl
    def on_train_batch_start(self) -> None:
        return None


def raw(loader: DataLoader, autocast: torch.dtype | None = None) -> float:
    net = make_net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    start = time.perf_counter()
    for x, y in loader:
        if autocast is None:
            loss = torch.nn.functional.cross_entropy(net(x), y)
        else:
            with torch.autocast("cpu", dtype=autocast):
                loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def with_ember(loader: DataLoader, **kwargs: Any) -> float:
    model = TinyModule()
    trainer = ember.Trainer(max_epochs=1, num_sanity_val_steps=0, **{**off_args(), **kwargs})
    start = time.perf_counter()
    trainer.fit(model, loader)
    return time.perf_counter() - start


def measure(pairs: list[tuple[str, Callable[[], float], Callable[[], float]]], steps: int, repeats: int) -> None:
    print(f"torch {torch.__version__}, ember {ember.__version__}, {steps} steps x {repeats} repeats, 1 thread")
    print(f"{'loop':34} {'us/step median (min-max)':>28} {'overhead us':>12} {'ratio':>7}")
    for label, base, candidate in pairs:
        base(), candidate()  # warm-up
        a, b = [], []
        for _ in range(repeats):
            a.append(base() / steps * 1e6)
            b.append(candidate() / steps * 1e6)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{'raw ' + label:34} {ma:10.1f} ({min(a):.1f}-{max(a):.1f}) {'':>12} {'1.000':>7}")
        print(f"{'ember ' + label:34} {mb:10.1f} ({min(b):.1f}-{max(b):.1f}) {mb - ma:12.1f} {mb / ma:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = make_loader(args.steps)
    measure([
        ("(nothing on)", lambda: raw(loader), lambda: with_ember(loader)),
        ("(+1 empty hook plugin)", lambda: raw(loader), lambda: with_ember(loader, plugins=[EmptyHook()])),
        ("(progress bar, csv logger)", lambda: raw(loader),
         lambda: with_ember(loader, enable_progress_bar=True, logger=True, default_root_dir=tempfile.mkdtemp())),
        ("(bf16-mixed)", lambda: raw(loader, torch.bfloat16), lambda: with_ember(loader, precision="bf16-mixed")),
    ], args.steps, args.repeats)


if __name__ == "__main__":
    main()
