"""Per-step overhead of ember's DDP strategy against a raw torch.distributed DDP loop, in the same processes.

    python benchmarks/ddp_overhead.py [--steps 500] [--repeats 11] [--nproc 2]

Starts ``--nproc`` processes with ember's launcher (gloo on the CPU; NCCL, one GPU per process, when CUDA is
available). In every process both loops train a 32-64-10 MLP with AdamW on batches of 32 per process drawn
through a ``DistributedSampler``: the raw loop wraps the network in ``DistributedDataParallel`` itself, ember
runs ``Trainer(strategy="ddp")``. Runs are interleaved (raw, ember, raw, ember, ...), each starts after a
barrier; its training is timed from the first step to after the last (ember's from ``on_train_start``),
its set-up (model, DDP wrap, sampler; ember's Trainer too) separately. A run's time is the slowest rank's.
The table shows medians with min-max; the overhead per step in microseconds and the ratio ember/raw are the
medians over the pairs (each ember run against the raw run just before it), which keeps the drift of a busy
machine out of them.
Rows: plain steps, and gradient accumulation over 2 micro-batches (``no_sync`` on the first of each pair).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import attrs
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ember

FEATURES_OFF = {"enable_progress_bar": False, "logger": False, "enable_checkpointing": False,
                "enable_model_summary": False, "detect_nonfinite_loss": False}
BATCH = 32


def off_args() -> dict[str, Any]:
    """The Trainer arguments that switch optional features off, for those this version has."""
    names = {f.name for f in attrs.fields(ember.TrainerConfig)}
    try:  # the arguments plugins declare (an older ember keeps them all in TrainerConfig)
        from ember.core.hooks.options import declared_options

        names |= {option.name for option in declared_options()}
    except ImportError:
        pass
    return {k: v for k, v in FEATURES_OFF.items() if k in names}


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


def make_dataset(steps: int, world: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    n = steps * BATCH * world
    return TensorDataset(torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StartClock:
    """Marks when training starts (after ember's set-up); implements no per-step hook, so it costs nothing."""

    def __init__(self) -> None:
        self.started = 0.0

    def on_train_start(self) -> None:
        self.started = time.perf_counter()


def raw(dataset: TensorDataset, device: torch.device, accumulate: int) -> tuple[float, float]:
    """(set-up seconds, training seconds) of a hand-written DDP loop."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    dist.barrier()
    start = time.perf_counter()
    net = make_net().to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, shuffle=True, seed=0))
    n = len(loader)
    started = time.perf_counter()
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        last = (i + 1) % accumulate == 0 or i + 1 == n
        if i % accumulate == 0:
            opt.zero_grad(set_to_none=True)
        if last:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            with model.no_sync():
                loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss / accumulate if accumulate > 1 else loss).backward()
        if last:
            opt.step()
    _sync(device)
    end = time.perf_counter()
    return started - start, end - started


def with_ember(dataset: TensorDataset, device: torch.device, accumulate: int) -> tuple[float, float]:
    """(set-up seconds, training seconds) of ``Trainer(strategy="ddp").fit``."""
    torch.manual_seed(0)
    clock = StartClock()
    dist.barrier()
    start = time.perf_counter()
    model = TinyModule()
    trainer = ember.Trainer(strategy="ddp", accelerator=device.type, devices="auto", max_epochs=1,
                            num_sanity_val_steps=0, accumulate_grad_batches=accumulate, callbacks=[clock],
                            **off_args())
    trainer.fit(model, DataLoader(dataset, batch_size=BATCH, shuffle=True))
    _sync(device)
    end = time.perf_counter()
    return clock.started - start, end - clock.started


def slowest(seconds: float, device: torch.device) -> float:
    t = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def worker(steps: int, repeats: int) -> None:
    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()
    dataset = make_dataset(steps, world)
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}, ember {ember.__version__}, {world} processes, backend "
              f"{dist.get_backend()}, {'CUDA ' + torch.cuda.get_device_name(device) if cuda else 'CPU, 1 thread each'}, "
              f"{steps} steps x {repeats} repeats, batch {BATCH} per process")
        print(f"{'loop':30} {'us/step median (min-max)':>28} {'overhead us':>12} {'ratio':>7}")
    setups: dict[str, list[float]] = {"raw": [], "ember": []}
    for label, accumulate in (("", 1), (" (accumulate 2)", 2)):
        raw(dataset, device, accumulate), with_ember(dataset, device, accumulate)  # warm-up
        a, b = [], []
        for _ in range(repeats):
            for name, run, times in (("raw", raw, a), ("ember", with_ember, b)):
                setup, train = run(dataset, device, accumulate)
                setups[name].append(slowest(setup, device))
                times.append(slowest(train, device) / steps * 1e6)
        if dist.get_rank() == 0:
            ma, mb = statistics.median(a), statistics.median(b)
            # Paired: each ember run against the raw run just before it, so that drift of a shared machine
            # cancels; the overhead and ratio are the medians of the pairs.
            diff = statistics.median(y - x for x, y in zip(a, b))
            ratio = statistics.median(y / x for x, y in zip(a, b))
            print(f"{'raw DDP' + label:30} {ma:10.1f} ({min(a):.1f}-{max(a):.1f}) {'':>12} {'1.000':>7}")
            print(f"{'ember ddp' + label:30} {mb:10.1f} ({min(b):.1f}-{max(b):.1f}) {diff:12.1f} {ratio:7.3f}",
                  flush=True)
    if dist.get_rank() == 0:
        print(f"set-up before the first step, once per fit (median): raw {statistics.median(setups['raw']) * 1e3:.1f} ms, "
              f"ember {statistics.median(setups['ember']) * 1e3:.1f} ms")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--nproc", type=int, default=None, help="processes (default: 2, or the GPUs up to 2)")
    args = parser.parse_args()
    if "LOCAL_RANK" in os.environ:  # one of the started processes
        worker(args.steps, args.repeats)
        return
    from ember.launcher import run_processes

    nproc = args.nproc or (min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 2)
    sys.exit(run_processes([os.path.abspath(__file__), *sys.argv[1:]], nproc))


if __name__ == "__main__":
    main()
