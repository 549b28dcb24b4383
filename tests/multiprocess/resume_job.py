"""The checkpoint-and-resume job of tests/test_distributed_resume.py (2 processes, started by ember).

``python resume_job.py OUT``. For DDP, then FSDP: a fit of 2 epochs that saves a checkpoint after step 5 (in
the middle of the first epoch) and goes on to the end; then a fresh model and Trainer resume from that
checkpoint with ``ckpt_path``. Shuffled data and dropout, each rank with its own random stream, so that
nothing but a per-rank exact resume gives the same weights. FSDP also resumes from the checkpoint
consolidated into one file, and a manually optimized FSDP fit resumes from a checkpoint that carries its
gradients. Rank 0 writes the whole weights to ``OUT/weights.pt``; each rank ``OUT/rank<r>.json``.

Like a script that keeps its trainers and models to the end, the job holds every one it made. After ember's exit
handler, each rank writes the process-group threads still running (read from ``/proc``; None elsewhere than Linux)
to ``OUT/exit-rank<r>.json``: a backend thread alive when the interpreter shuts down can abort the process.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from typing import Any

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import tiny_dataset

#: Every (model, trainer) of the job, kept to the end as a script's globals are.
KEPT: list[tuple] = []


class Dropout(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16)])
        self.head = torch.nn.Linear(16, 3)
        self.drop = torch.nn.Dropout(0.3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        h = self.drop(torch.relu(self.layers[0](torch.relu(self.inp(x)))))
        loss = torch.nn.functional.cross_entropy(self.head(h), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class ManualDropout(Dropout):
    """Manual optimization: the gradients are still there when the checkpoint is written, so it carries them."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        opt.zero_grad()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        opt.step()
        return loss


class SaveAtStep5:
    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer: Any) -> None:
        if trainer.global_step == 0:  # a fresh start: give each rank its own random stream
            torch.manual_seed(1000 + trainer.global_rank)

    def on_train_batch_end(self, trainer: Any) -> None:
        if trainer.global_step == 5:
            trainer.save_checkpoint(self.path)


class WriteProbe:
    """Sees a save that gets past the strategy (which answers it on ranks that do not write)."""

    def __init__(self) -> None:
        self.reached = 0

    @ember.hookimpl
    def save_checkpoint(self) -> None:
        self.reached += 1


class SaveThreads:
    """Wraps save_checkpoint (which keeps writes in the background): the thread each save ran on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    @ember.hookimpl(wrapper=True)
    def save_checkpoint(self) -> Any:
        self.threads.append(threading.current_thread().name)
        return (yield)


def fit(out: str, strategy: str, ckpt_path: str | None = None, save: str | None = None,
        probe: Any = None, manual: bool = False) -> tuple:
    ember.seed_everything(0)
    model = ManualDropout() if manual else Dropout()
    callbacks: list[Any] = [SaveAtStep5(save)] if save else []
    callbacks += [probe] if probe else []
    trainer = ember.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_epochs=2, num_sanity_val_steps=0,
                            enable_checkpointing=False, enable_progress_bar=False, logger=False,
                            default_root_dir=out, callbacks=callbacks)
    trainer.fit(model, DataLoader(tiny_dataset(64), batch_size=4, shuffle=True), ckpt_path=ckpt_path)
    KEPT.append((model, trainer))
    state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    return state, trainer


def main(out: str) -> None:
    result: dict[str, Any] = {}
    weights = {}
    fsdp = os.environ.get("EMBER_TEST_FSDP") == "1"  # the tests' fsdp_available(): strategy.fsdp runs here
    for strategy in ("ddp", "fsdp") if fsdp else ("ddp",):
        mid = os.path.join(out, f"{strategy}-mid.ckpt")
        probe = WriteProbe()
        weights[f"{strategy}_full"], trainer = fit(out, strategy, save=mid, probe=probe)
        result[f"{strategy}_writes_reached"] = probe.reached
        weights[f"{strategy}_resumed"], resumed = fit(out, strategy, ckpt_path=mid)
        result[f"{strategy}_resumed_from_step"] = resumed.ckpt_path == mid
        # what the fits left; not this job's own result files, which the other rank may have written by now
        result[f"{strategy}_files"] = sorted(n for n in os.listdir(out) if not n.endswith(".json"))
    if fsdp:
        fsdp_parts(out, trainer.global_rank, result, weights)
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(result, f)
    if trainer.global_rank == 0:
        torch.save(weights, os.path.join(out, "weights.pt"))


def fsdp_parts(out: str, rank: int, result: dict, weights: dict) -> None:
    import torch.distributed as dist

    from ember.plugins.strategies import sharded_checkpoint

    if rank == 0:
        sharded_checkpoint.consolidate(os.path.join(out, "fsdp-mid.ckpt"), os.path.join(out, "fsdp-mid-whole.ckpt"))
    dist.barrier()
    weights["fsdp_from_whole"], _ = fit(out, "fsdp", ckpt_path=os.path.join(out, "fsdp-mid-whole.ckpt"))
    manual = os.path.join(out, "manual-mid.ckpt")
    threads = SaveThreads()
    weights["manual_full"], _ = fit(out, "fsdp", save=manual, manual=True, probe=threads)
    result["manual_save_threads"] = threads.threads
    weights["manual_resumed"], _ = fit(out, "fsdp", ckpt_path=manual, manual=True)
    from torch.distributed.checkpoint import FileSystemReader

    saved = FileSystemReader(manual).read_metadata().state_dict_metadata
    result["manual_saved_grads"] = sorted(k for k in saved if k.startswith("grads."))


def record_exit_threads(out: str) -> None:
    """Registered before the first fit, so it runs after ember's exit handler (atexit runs the last first)."""
    threads = None
    if sys.platform.startswith("linux"):
        threads = []
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as f:
                    name = f.read().strip()
            except OSError:  # the thread has just ended
                continue
            if "gloo" in name or "nccl" in name:
                threads.append(name)
    with open(os.path.join(out, f"exit-rank{os.environ.get('RANK', 0)}.json"), "w") as f:
        json.dump({"threads": sorted(threads) if threads is not None else None}, f)


if __name__ == "__main__":
    atexit.register(record_exit_threads, sys.argv[1])
    main(sys.argv[1])
