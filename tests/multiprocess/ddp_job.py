"""The 2-process DDP job of tests/test_ddp.py.

``python ddp_job.py OUT [ACCELERATOR DEVICES]``: ``Trainer(strategy="ddp", devices=2)`` starts the two processes
itself (ember's launcher re-runs this script). Each rank writes ``OUT/rank<r>.json``; rank 0 writes the
weights of each fit. Every fit uses a global batch of 8 (``8 // DEVICES`` per rank); tests/test_ddp_cuda.py
runs it with ``cuda 1`` (an NCCL group of one) and ``cuda 2``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.testing import TinyClassifier, tiny_dataset

N = 64


def dataset() -> TensorDataset:
    x, y = tiny_dataset(N).tensors
    return TensorDataset(x, y, torch.arange(N))


class Model(TinyClassifier):
    """TinyClassifier that remembers which samples it saw and logs rank-dependent values."""

    def __init__(self) -> None:
        super().__init__(lr=0.1)
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        self.seen.append(idx.tolist())
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_synced", float(self.global_rank), on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_local", float(self.global_rank), on_step=False, on_epoch=True)
        self.log("rank_step", float(self.global_rank), on_step=True, on_epoch=False, sync_dist=True)
        return loss


def fit(batch_size: int, shuffle: bool = False, plugins: tuple = (), **trainer_args: Any) -> tuple[Model, ember.Trainer]:
    """One fit of the job; the test runs the same in one process with the global batch size."""
    ember.seed_everything(0)
    model = Model()
    args = {"accelerator": "cpu", **trainer_args}  # the test's one-process reference runs on the CPU too
    trainer = ember.Trainer(max_epochs=2, num_sanity_val_steps=0, plugins=list(plugins), **args)
    trainer.fit(model, DataLoader(dataset(), batch_size=batch_size, shuffle=shuffle))
    return model, trainer


class CountAllreduce:
    """Counts DDP's gradient all-reduces (one per bucket per synchronised backward)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_fit_start(self, trainer: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):  # no annotations: DDP checks them against dist.GradBucket
            self.calls += 1
            return default_hooks.allreduce_hook(state, bucket)

        trainer.model.register_comm_hook(None, hook)


class LogCalls:
    def __init__(self) -> None:
        self.calls = 0

    @ember.hookimpl
    def log_metrics(self) -> None:
        self.calls += 1


class Collectives:
    """Calls every collective from inside the run (on_fit_end) and keeps the answers."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def on_fit_end(self, trainer: Any) -> None:
        rank = trainer.global_rank
        x = torch.tensor([rank + 1.0], requires_grad=True)
        trainer.all_gather(x, sync_grads=True).sum().backward()
        trainer.barrier("collectives")
        self.result = {
            "reduce_sum": trainer.reduce(torch.tensor(rank + 1.0), "sum").item(),
            "reduce_mean": trainer.reduce(torch.tensor(rank + 1.0), "mean").item(),
            "reduce_max": trainer.reduce(torch.tensor(float(rank)), "max").item(),
            "gather": trainer.all_gather(torch.tensor([rank, 10 + rank])).tolist(),
            "gather_grad": x.grad.item(),
            "broadcast": trainer.broadcast({"from": rank}, src=trainer.world_size - 1),
            "broadcast_none": trainer.broadcast(None if rank == 0 else "mine", src=0),
            "any": trainer.reduce_boolean_decision(rank == 1, all=False),
            "all": trainer.reduce_boolean_decision(rank == 1, all=True),
        }


def main(out: str, accelerator: str = "cpu", devices: int = 2) -> None:
    import torch.distributed as dist

    ddp = {"strategy": "ddp", "devices": devices, "accelerator": accelerator}
    batch = 8 // devices
    logs, collectives = LogCalls(), Collectives()
    model, trainer = fit(batch, plugins=(logs,), callbacks=[collectives], log_every_n_steps=1, **ddp)
    rank = trainer.global_rank
    result: dict[str, Any] = {
        "rank": rank, "world_size": trainer.world_size, "backend": dist.get_backend(),
        "model_type": type(trainer.model).__name__, "roles": trainer.role_identities,
        "param_device": str(next(model.parameters()).device),
        "seen": model.seen, "log_metrics_calls": logs.calls,
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()}, **collectives.result,
    }
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out, "plain.pt"))

    counter = CountAllreduce()
    model, trainer = fit(batch, accumulate_grad_batches=2, callbacks=[counter], **ddp)
    result["accumulate_allreduces"] = counter.calls
    result["accumulate_steps"] = trainer.global_step
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(out, "accumulate.pt"))

    model, trainer = fit(batch, shuffle=True, **ddp)
    result["shuffled_seen"] = model.seen
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:3], *[int(n) for n in sys.argv[3:4]])
