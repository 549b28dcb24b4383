"""What checkpointing costs per training step, against a raw PyTorch loop in the same run.

    python benchmarks/checkpoint_overhead.py [--steps 3000] [--repeats 5]

An overhead-bound model (a tiny MLP on CPU, batch 32, data already in memory) makes the loop's own cost
visible; the progress bar, logger and model summary are off in every ember row. Rows: the raw loop; ember with checkpointing off; ember with the default checkpoint callback
(``last.ckpt`` and the newest epoch file at every epoch end); ember saving every 500 steps. Each ember row
prints microseconds per step over the raw loop and the ratio. A second table times one atomic save
(fsync included) and one load of checkpoints of a few sizes; a third the training thread's stall per save
(wall clock) with checkpoints written in the background (the default) and on the training thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import atomic_save, safe_load


class MLP(ember.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 32, 16, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=32, shuffle=True)


def raw(steps: int) -> float:
    torch.manual_seed(0)
    model = MLP()
    opt = model.configure_optimizers()
    data = loader(steps)
    start = time.perf_counter()
    for batch_idx, batch in enumerate(data):
        loss = model.training_step(batch, batch_idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def with_ember(steps: int, root: str, **kwargs: Any) -> float:
    torch.manual_seed(0)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=root, num_sanity_val_steps=0, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, **kwargs)
    data = loader(steps)
    model = MLP()
    start = time.perf_counter()
    trainer.fit(model, data)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stall-only", action="store_true", help="only the training-thread stall table")
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "cuda"),
                        help="where the stall table's model trains (cuda: weights copied to pinned host memory)")
    args = parser.parse_args()
    if args.stall_only:
        with tempfile.TemporaryDirectory() as root:
            print_stalls(root, args.repeats, args.accelerator)
        return
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        rows = {
            "ember, checkpointing off": {"enable_checkpointing": False},
            "ember, default checkpointing": {},
            "ember, every 500 steps + last": {"callbacks": [ModelCheckpoint(every_n_train_steps=500,
                                                                            dirpath=os.path.join(root, "s"))]},
        }
        times: dict[str, list[float]] = {"raw PyTorch loop": []}
        times.update({name: [] for name in rows})
        for _ in range(args.repeats):  # interleaved, so drift in machine load hits every row alike
            times["raw PyTorch loop"].append(raw(args.steps))
            for name, kwargs in rows.items():
                times[name].append(with_ember(args.steps, root, **kwargs))
        print(f"{args.steps} steps, {args.repeats} interleaved runs, torch {torch.__version__}, 1 thread; "
              "median and (fastest run)")
        print(f"{'':34s}{'us/step':>18s}{'over raw':>20s}{'ratio':>14s}")
        base, base_min = statistics.median(times["raw PyTorch loop"]), min(times["raw PyTorch loop"])
        for name, values in times.items():
            t, fastest = statistics.median(values), min(values)
            per_step = lambda x: x / args.steps * 1e6  # noqa: E731
            print(f"{name:34s}{per_step(t):9.1f} ({per_step(fastest):6.1f}){per_step(t - base):11.1f} "
                  f"({per_step(fastest - base_min):6.1f}){t / base:7.2f} ({fastest / base_min:4.2f})")

        print("\none checkpoint: atomic save (fsync included) and load")
        for width in (32, 1024, 4096):
            model = MLP(width)
            opt = torch.optim.Adam(model.parameters())
            model.net(torch.randn(2, 16)).sum().backward()
            opt.step()
            checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [opt.state_dict()]}
            path = os.path.join(root, f"w{width}.ckpt")
            saves, loads = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                atomic_save(checkpoint, path)
                saves.append(time.perf_counter() - start)
                start = time.perf_counter()
                safe_load(path)
                loads.append(time.perf_counter() - start)
            size = os.path.getsize(path) / 2**20
            print(f"  {size:8.2f} MiB   save {statistics.median(saves) * 1e3:8.2f} ms   "
                  f"load {statistics.median(loads) * 1e3:8.2f} ms")
        print_stalls(root, max(1, args.repeats // 2))


class Wide(MLP):
    """An MLP of about ``params`` parameters, for the stall table."""

    def __init__(self, params: int) -> None:
        ember.Module.__init__(self)
        width = max(4, params // 20)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))


def stall_per_save(params: int, root: str, async_save: bool, epochs: int = 4, accelerator: str = "cpu") -> list[float]:
    """Wall-clock seconds the training thread spends in each checkpoint write of a fit (one per epoch)."""
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=root, num_sanity_val_steps=0, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, accelerator=accelerator,
                            checkpoint_io=TorchCheckpointIO(async_save=async_save),
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(root, f"stall-{async_save}"))])
    checkpointing = trainer.checkpointing
    write, stalls = checkpointing._write, []

    def timed(*args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        write(*args, **kwargs)
        stalls.append(time.perf_counter() - start)

    checkpointing._write = timed  # type: ignore[method-assign]
    trainer.fit(Wide(params), loader(8))
    return stalls[:-1]  # the last one is the write at the end of training, always awaited


def print_stalls(root: str, repeats: int, accelerator: str = "cpu") -> None:
    print(f"\ntraining-thread stall per save (wall clock, median over saves; {accelerator}): background vs "
          "synchronous")
    sizes = (10_000, 2_000_000, 20_000_000) + ((100_000_000,) if accelerator == "cuda" else ())
    for params in sizes:
        row = {}
        for async_save in (True, False):
            stalls = [s for _ in range(repeats) for s in stall_per_save(params, root, async_save,
                                                                        accelerator=accelerator)]
            row[async_save] = statistics.median(stalls) * 1e3
        print(f"  {params * 4 / 2**20:8.1f} MiB of weights   background {row[True]:8.2f} ms   "
              f"synchronous {row[False]:8.2f} ms")


if __name__ == "__main__":
    main()
