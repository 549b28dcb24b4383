"""What a checkpoint of a large model costs the training thread, per save, with each writer.

    python -m benchmarks.checkpoint_stall [--params 100000000] [--epochs 3] [--repeats 2]

The model holds ``--params`` parameters (a frozen weight of that size next to a small trainable MLP, so that a
training step costs the same whatever the size and the checkpoint is the large part), trains in epochs long
enough for a write to finish within one (``--epoch-seconds`` of steps), and saves a checkpoint every epoch.
Rows: the writer thread (``TorchCheckpointIO()``, the default), the writer process
(``TorchCheckpointIO(writer="process")``) and a synchronous save (``async_save=False``), against the same fit
with checkpointing off, one fit of each in turn, ``--repeats`` rounds. Per save, wall clock:

* ``first save``: the same for a fit's first save, which also allocates the buffers later saves reuse;
* ``in save``: time the training thread spends in a later save (the copy to host or shared memory, handing it
  over), without waiting for the previous write;
* ``waited``: time it waited for the previous write to finish (non-zero when a write outlasts an epoch);
* ``slowed``: how much longer the fit's training steps took than with checkpointing off, per save: what the
  background write took from the training thread (the interpreter lock, the cores) while it ran;
* ``stall``: in save + waited + slowed.

The last save of a fit is left out (the end of a fit waits for it by design).
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
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO


class Large(ember.Module):
    def __init__(self, params: int) -> None:
        super().__init__()
        self.frozen = torch.nn.Parameter(torch.randn(params), requires_grad=False)
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.net.parameters(), lr=1e-3)


def loader(steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * 64, 256, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=64)


class Timing:
    """Times each step and each save of one fit on the training thread."""

    identity = "bench.timing"

    def __init__(self) -> None:
        self.steps = 0.0
        self._step_start = 0.0

    def on_train_batch_start(self) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self) -> None:
        self.steps += time.perf_counter() - self._step_start


def one_fit(params: int, steps: int, epochs: int, root: str, storage: Any) -> tuple[float, list[float], list[float]]:
    """Training-step seconds, and per save the seconds in it and the seconds waiting for the previous write."""
    timing = Timing()
    enabled = storage is not None
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=root, num_sanity_val_steps=0, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=enabled,
                            plugins=[timing], **({"checkpoint_io": storage} if enabled else {}),
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck"))] if enabled else [])
    saves: list[float] = []
    waits: list[float] = []
    if enabled:
        ckpt = trainer.checkpointing
        write, wait = ckpt._write, ckpt.writer.wait

        def timed_wait() -> None:
            start = time.perf_counter()
            wait()
            waits[-1] += time.perf_counter() - start

        def timed_write(*args: Any, **kwargs: Any) -> None:
            waits.append(0.0)
            start = time.perf_counter()
            write(*args, **kwargs)
            saves.append(time.perf_counter() - start)

        ckpt._write = timed_write  # type: ignore[method-assign]
        ckpt.writer.wait = timed_wait  # type: ignore[method-assign]
    model = Large(params)
    trainer.fit(model, loader(steps))
    return timing.steps, saves[:-1], waits[:-1]


def steps_per_epoch(params: int, seconds: float, root: str) -> int:
    """Steps that take about ``seconds`` on this machine."""
    steps, _, _ = one_fit(params, 64, 1, root, None)
    return max(8, int(64 * seconds / max(steps, 1e-6)))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_stall", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=float, default=100e6)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--epoch-seconds", type=float, default=6.0, help="length of an epoch (default 6 s)")
    p.add_argument("--steps", type=int, default=0, help="steps per epoch (default: as many as --epoch-seconds takes)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    params = int(args.params)
    rows = {"writer thread": lambda: TorchCheckpointIO(),
            "writer process": lambda: TorchCheckpointIO(writer="process"),
            "synchronous": lambda: TorchCheckpointIO(async_save=False)}
    results: dict[str, list[tuple[float, list[float], list[float]]]] = {name: [] for name in ["off", *rows]}
    with tempfile.TemporaryDirectory() as root:
        steps = args.steps or steps_per_epoch(params, args.epoch_seconds, root)
        with tempfile.TemporaryDirectory(dir=root) as run:  # warm-up, not counted: starts the forkserver
            started = time.perf_counter()
            one_fit(params, 8, 2, run, TorchCheckpointIO(writer="process"))
            first = time.perf_counter() - started
        for _ in range(args.repeats):
            for name, make in [("off", lambda: None), *rows.items()]:
                with tempfile.TemporaryDirectory(dir=root) as run:
                    results[name].append(one_fit(params, steps, args.epochs, run, make()))
    base = statistics.median(r[0] for r in results["off"])
    print(f"{params / 1e6:.0f}M parameters ({params * 4 / 2**20:.0f} MiB of weights), {args.epochs} epochs of "
          f"{steps} steps ({base / args.epochs:.1f} s of steps each without checkpoints), a checkpoint each epoch; "
          f"{args.repeats} rounds; per save (median; the fit's last save left out), ms:")
    print(f"  (a warm-up fit with the writer process first, not counted: {first:.1f} s, the interpreter's first "
          "writer process starting its forkserver)")
    print(f"  {'':16} {'first save':>10} {'in save':>10} {'waited':>10} {'slowed':>10} {'stall':>10}")
    for name in rows:
        # the first save of a fit also allocates the host (or shared) buffers that later saves reuse
        first_saves = [r[1][0] - r[2][0] for r in results[name] if r[1]]
        saves = [s for r in results[name] for s in r[1][1:]] or [float("nan")]
        waits = [w for r in results[name] for w in r[2][1:]] or [float("nan")]
        n = max(1, args.epochs - 1)
        slowed = statistics.median((r[0] - base) / n for r in results[name])
        in_save = statistics.median(s - w for s, w in zip(saves, waits, strict=True))
        waited = statistics.median(waits)
        print(f"  {name:16} {statistics.median(first_saves) * 1e3:10.1f} {in_save * 1e3:10.1f} "
              f"{waited * 1e3:10.1f} {slowed * 1e3:10.1f} {(in_save + waited + slowed) * 1e3:10.1f}")


if __name__ == "__main__":
    main()
