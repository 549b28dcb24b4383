"""A small, fully random training job for the resume tests: shuffled data, random augmentation drawn from
torch, NumPy and Python's ``random``, dropout, gradient accumulation, a per-step scheduler, validation, two
checkpoint callbacks. Deterministic on the CPU given the seed.

Run as a script (``python ckpt_job.py OUT_DIR [--kill ...]``) it can kill itself at a chosen point, to test
resuming after a crash; imported, :func:`run` does the same work in-process.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Generator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import ember
from ember.plugins._shared import torch_save
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint

N, FEATURES, CLASSES, BATCH = 48, 6, 3, 6  # 8 batches per epoch


class Augmented(Dataset):
    """Map-style data whose every item draws from three random generators; counts the items it loads."""

    def __init__(self, n: int = N, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, FEATURES, generator=g)
        self.y = (self.x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(1)
        self.loaded = 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.loaded += 1
        x = self.x[i] + 0.1 * torch.randn(FEATURES)
        x = x * float(np.random.uniform(0.9, 1.1))
        if random.random() < 0.5:
            x = x.flip(0)
        return x, self.y[i]


class Net(ember.Module):
    def __init__(self, hidden: int = 16, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, hidden), torch.nn.Dropout(0.3), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, CLASSES))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Killer:
    """Ends the process with SIGKILL (or sends it a signal) at a chosen point."""

    identity = "test.killer"

    def __init__(self, point: str, at: int, signum: int = signal.SIGKILL) -> None:
        self.point, self.at, self.signum = point, at, signum
        self.saves = 0

    def on_train_batch_start(self, trainer: Any, batch_idx: int) -> None:
        if self.point == "batch" and trainer.loop.progress.batches_seen == self.at:
            os.kill(os.getpid(), self.signum)

    @ember.hookimpl(wrapper=True)
    def save_checkpoint(self) -> Generator[None, Any, Any]:
        self.saves += 1
        if self.point == "during-save" and self.saves == self.at:
            real_save = torch.save

            def half_then_die(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
                buffer = io.BytesIO()
                real_save(obj, buffer, *args, **kwargs)
                f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                f.flush()
                os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)

            torch.save = half_then_die
            torch_save.save = half_then_die  # what checkpoint_io.torch writes with: torch.save's bytes
        result = yield
        if self.point == "after-save" and self.saves == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return result


def run(out: str, precision: str = "32-true", kill: str | None = None, at: int = 0, resume: bool = False,
        max_epochs: int = 3, signum: int = signal.SIGKILL, writer: str = "thread") -> dict[str, Any]:
    """Train; returns the final module and optimizer states and how many items the data loaded."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same arithmetic in every process
    try:
        return _run(out, precision, kill, at, resume, max_epochs, signum, writer)
    finally:
        torch.set_num_threads(threads)


def _run(out: str, precision: str, kill: str | None, at: int, resume: bool, max_epochs: int,
         signum: int, writer: str = "thread") -> dict[str, Any]:
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    ember.seed_everything(0)
    model = Net()
    data = Augmented()
    train = DataLoader(data, batch_size=BATCH, shuffle=True)
    val = DataLoader(Augmented(12, seed=1), batch_size=BATCH)
    callbacks = [ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=3),
                 ModelCheckpoint(dirpath=os.path.join(out, "best"), monitor="val_loss", save_top_k=2,
                                 save_last=False, filename="{epoch}-{val_loss:.4f}")]
    plugins = [Killer(kill, at, signum)] if kill else []
    trainer = ember.Trainer(accelerator="cpu", max_epochs=max_epochs, precision=precision, accumulate_grad_batches=2,
                            callbacks=callbacks, plugins=plugins, default_root_dir=out, num_sanity_val_steps=1,
                            logger=False, enable_progress_bar=False, enable_model_summary=False,
                            val_check_interval=4, log_every_n_steps=1,
                            **({"checkpoint_io": TorchCheckpointIO(writer=writer)} if writer != "thread" else {}))
    trainer.fit(model, train, val, ckpt_path="last" if resume else None)
    return {"module": model.state_dict(), "optimizer": trainer.optimizers[0].state_dict(),
            "scheduler": trainer.lr_scheduler_configs[0].scheduler.state_dict(), "loaded": data.loaded,
            "trainer": trainer, "best": dict(callbacks[1].best_k_models)}


#: Test-only: ``EMBER_TEST_SLOW_WRITE=N`` makes the N-th checkpoint file written on a background thread (or in the
#: writer process) stop halfway through (fsynced), write ``OUT/writing`` with the thread's name (or
#: ``process <pid>``), and hang until killed.
SLOW_WRITE_ENV = "EMBER_TEST_SLOW_WRITE"
SLOW_WRITE_OUT_ENV = "EMBER_TEST_SLOW_WRITE_OUT"


def hang_in_writer_process() -> None:
    """``WriterProcess.setup`` for the slow write: runs in the writer process."""
    hang_in_background_write(os.environ[SLOW_WRITE_OUT_ENV], int(os.environ[SLOW_WRITE_ENV]))


def hang_in_background_write(out: str, nth: int) -> None:
    import multiprocessing

    from ember.plugins._shared import checkpoint_files

    real_write = checkpoint_files._atomic_write
    in_writer_process = multiprocessing.current_process().name == "ember-checkpoint-writer"
    count = 0

    def atomic_write(path: str, write: Any, content: Any, **how: Any) -> None:
        nonlocal count
        if threading.current_thread() is threading.main_thread() and not in_writer_process:
            return real_write(path, write, content, **how)
        count += 1
        if count != nth:
            return real_write(path, write, content, **how)

        def half(f: Any) -> None:
            buffer = io.BytesIO()
            write(buffer)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            f.flush()
            os.fsync(f.fileno())
            with open(os.path.join(out, "writing.tmp"), "w") as marker:
                marker.write(threading.current_thread().name if threading.current_thread() is not
                             threading.main_thread() else f"process {os.getpid()}")
            os.replace(os.path.join(out, "writing.tmp"), os.path.join(out, "writing"))
            time.sleep(300)

        return real_write(path, half, content, **how)

    checkpoint_files._atomic_write = atomic_write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--kill", choices=["batch", "after-save", "during-save"])
    parser.add_argument("--at", type=int, default=0)
    parser.add_argument("--signal", type=int, default=int(signal.SIGKILL))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--writer", default="thread", choices=["thread", "process"])
    args = parser.parse_args(argv)
    if os.environ.get(SLOW_WRITE_ENV):
        if args.writer == "process":
            from ember.core.checkpointing import writer_process

            os.environ[SLOW_WRITE_OUT_ENV] = args.out
            writer_process.child_setup = hang_in_writer_process
        else:
            hang_in_background_write(args.out, int(os.environ[SLOW_WRITE_ENV]))
    result = run(args.out, args.precision, args.kill, args.at, args.resume, signum=args.signal, writer=args.writer)
    torch.save({k: result[k] for k in ("module", "optimizer", "scheduler", "loaded", "best")},
               os.path.join(args.out, "final.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
