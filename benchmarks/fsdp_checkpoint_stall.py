"""The training thread's stall per sharded checkpoint under FSDP: background (the default) against synchronous.

    python benchmarks/fsdp_checkpoint_stall.py [--accelerator cpu|cuda] [--width 512] [--epochs 6] [--quick]
                                               [--modes background synchronous]

Two processes (``strategy="fsdp", devices=2``; gloo on the CPU, NCCL on CUDA) train an MLP of eight
``width x width`` layers with AdamW, 8 steps per epoch, and save a sharded checkpoint at every epoch end
(``ModelCheckpoint``: the epoch's directory and ``last.ckpt``). Rank 0 times each safe point that wrote
checkpoints: in the background the training thread pays the copy of its shards to host memory; synchronously,
the whole write (DCP, checksums, renames and their collectives). The first background save also makes the
process group of the writer's collectives; the table shows it apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO


class Layers(ember.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(8)])
        self.head = torch.nn.Linear(width, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        for layer in self.layers:
            x = torch.relu(layer(x))
        return torch.nn.functional.cross_entropy(self.head(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class SaveStalls:
    """Times the loop's safe points that write checkpoints (on the training thread)."""

    def __init__(self) -> None:
        self.stalls: list[float] = []

    def setup(self, trainer: Any) -> None:
        checkpointing = trainer.checkpointing
        safe_point = checkpointing.safe_point

        def timed(*args: Any, **kwargs: Any) -> None:
            saving = any(op == "save" for op, _, _ in checkpointing._requests)
            start = time.perf_counter()
            safe_point(*args, **kwargs)
            if saving:
                self.stalls.append(time.perf_counter() - start)

        checkpointing.safe_point = timed


def job(mode: str, accelerator: str, width: int, epochs: int, root: str) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8 * 16, width, generator=g), torch.randint(0, 4, (8 * 16,), generator=g))
    stalls = SaveStalls()
    trainer = ember.Trainer(accelerator=accelerator, strategy="fsdp", devices=2, max_epochs=epochs,
                            num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[stalls], default_root_dir=root,
                            checkpoint_io=TorchCheckpointIO(async_save=mode == "background"))
    trainer.fit(Layers(width), DataLoader(data, batch_size=16))
    if trainer.global_rank == 0:
        print(json.dumps({"mode": mode, "stalls": stalls.stalls}))


def run(mode: str, accelerator: str, width: int, epochs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", mode, "--accelerator", accelerator,
                              "--width", str(width), "--epochs", str(epochs), "--root", root],
                             capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the {mode} job failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])["stalls"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerator", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="a small model, 2 epochs: a smoke run")
    parser.add_argument("--modes", nargs="+", choices=("background", "synchronous"),
                        default=["background", "synchronous"])
    parser.add_argument("--job", choices=("background", "synchronous"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.epochs = 32, 2
    if args.job:
        job(args.job, args.accelerator, args.width, args.epochs, args.root)
        return
    params = 8 * (args.width * args.width + args.width) + args.width * 4 + 4
    print(f"FSDP, 2 processes, {args.accelerator}: {params / 1e6:.2f}M parameters with AdamW, a sharded checkpoint "
          f"every epoch of 8 steps; training-thread stall per save (wall clock, rank 0)")
    for mode in args.modes:
        stalls = [s * 1e3 for s in run(mode, args.accelerator, args.width, args.epochs)]
        first, rest = stalls[0], stalls[1:] or stalls
        print(f"  {mode:12s} median {statistics.median(rest):8.2f} ms  (min {min(rest):.2f}, max {max(rest):.2f}; "
              f"first save {first:.2f} ms)")


if __name__ == "__main__":
    main()
