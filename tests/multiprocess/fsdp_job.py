"""The 2-process FSDP2 job of tests/test_fsdp.py.

``python fsdp_job.py OUT``: ``Trainer(strategy="fsdp", devices=2)`` starts the two processes itself. Rank 0
writes the full weights of each fit and ``OUT/result.json``; a sharded checkpoint lands in ``OUT/ckpt``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import tiny_dataset


class Blocks(ember.Module):
    """Input layer, two blocks in a ModuleList (sharded on their own by default), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])
        self.head = torch.nn.Linear(16, 3)
        self.forward_dtypes: set[str] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.inp(x))
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)

    def training_step(self, batch: Any, i: int) -> torch.Tensor:  # not called batch_idx: FSDP's wrapper must pass it
        x, y = batch
        self.forward_dtypes.add(str(self.inp.weight.dtype))  # the root group, gathered for this step
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class BuiltLate(Blocks):
    """The same layers, created in configure_model (on the meta device under FSDP)."""

    def __init__(self) -> None:
        ember.Module.__init__(self)
        self.forward_dtypes = set()
        self.built_on: str | None = None

    def configure_model(self) -> None:
        if hasattr(self, "inp"):
            return
        self.inp = torch.nn.Linear(8, 64)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(64, 64) for _ in range(2)])
        self.head = torch.nn.Linear(64, 3)
        self.built_on = str(self.inp.weight.device)


def loader(batch_size: int) -> DataLoader:
    return DataLoader(tiny_dataset(64), batch_size=batch_size)


def fit(batch_size: int, model: ember.Module | None = None, callbacks: tuple = (), **trainer_args: Any) -> tuple:
    ember.seed_everything(0)
    model = model or Blocks()
    # clipping: the norm is over all shards
    args = {"accelerator": "cpu", "max_epochs": 2, "gradient_clip_val": 0.3, **trainer_args}
    trainer = ember.Trainer(num_sanity_val_steps=0, callbacks=list(callbacks), **args)
    trainer.fit(model, loader(batch_size))
    return model, trainer


def full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights on every rank (a collective under FSDP)."""
    return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in module.state_dict().items()}


class SaveSharded:
    """Writes a sharded checkpoint at the end of the first epoch."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        from ember.plugins.strategies import sharded_checkpoint

        if trainer.current_epoch == 0:
            checkpoint = {"epoch": trainer.current_epoch, "global_step": trainer.global_step}
            sharded_checkpoint.save(checkpoint, self.path, module, trainer.optimizers)


class LoadSharded:
    """Loads the sharded checkpoint before training starts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.checkpoint: dict = {}

    def on_train_start(self, trainer: Any, module: Any) -> None:
        from ember.plugins.strategies import sharded_checkpoint

        self.checkpoint = sharded_checkpoint.load(self.path, module)  # as ckpt_path=... does
        module.load_state_dict(self.checkpoint["state_dict"])
        for optimizer, state in zip(trainer.optimizers, self.checkpoint["optimizer_states"], strict=True):
            optimizer.load_state_dict(state)


def main(out: str) -> None:
    from torch.distributed.fsdp import FSDPModule

    fsdp = {"strategy": "fsdp", "devices": 2}
    result: dict[str, Any] = {}
    saves: dict[str, dict] = {}

    ckpt = os.path.join(out, "ckpt")
    model, trainer = fit(4, accumulate_grad_batches=2, callbacks=(SaveSharded(ckpt),), **fsdp)
    rank = trainer.global_rank
    result["sharded"] = sorted(name or "<root>" for name, m in model.named_modules() if isinstance(m, FSDPModule))
    result["param_types"] = sorted({type(p).__name__ for p in model.parameters()})
    result["local_rows"] = model.inp.weight.to_local().shape[0]
    result["forward_dtypes_fp32"] = sorted(model.forward_dtypes)
    result["loss"] = float(trainer.callback_metrics["train_loss"])
    saves["fp32"] = full_state(model)

    resumed, _ = fit(4, max_epochs=1, accumulate_grad_batches=2, callbacks=(loader_cb := LoadSharded(ckpt),), **fsdp)
    result["resumed_meta"] = loader_cb.checkpoint.get("global_step")
    saves["resumed"] = full_state(resumed)

    model, trainer = fit(4, precision="bf16-mixed", **fsdp)
    result["forward_dtypes_bf16"] = sorted(model.forward_dtypes)
    saves["bf16"] = full_state(model)

    late = BuiltLate()
    late_first = {}

    class FirstShards:
        def on_train_start(self, trainer: Any, module: Any) -> None:
            late_first["rows"] = module.inp.weight.to_local().detach().clone()
            late_first["full"] = module.inp.weight.full_tensor().detach().clone()

    model, trainer = fit(4, model=late, callbacks=(FirstShards(),), **fsdp)
    result["late_built_on"] = late.built_on
    result["late_param_types"] = sorted({type(p).__name__ for p in late.parameters()})
    full = late_first["full"]
    half = full.shape[0] // 2
    result["late_shards_differ"] = not torch.equal(full[:half], full[half:])
    result["late_shard_is_mine"] = torch.equal(late_first["rows"], full[rank * half:(rank + 1) * half])
    result["late_init_std"] = float(full.std())
    result["late_loss"] = float(trainer.callback_metrics["train_loss"])
    if rank == 0:
        torch.save(saves, os.path.join(out, "weights.pt"))
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
