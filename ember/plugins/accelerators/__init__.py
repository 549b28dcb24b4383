"""Accelerators: where tensors live (``accelerator.cpu``, ``accelerator.cuda``, ``accelerator.mps``)."""

from __future__ import annotations

from typing import Any

import torch

#: Strategies whose module holds this process's shards: left where they are when a run ends.
SHARDED = ("strategy.fsdp",)


def device_index(trainer: Any) -> int:
    """The device index for this process from ``Trainer(devices=...)`` and the local rank."""
    devices = trainer.config.devices
    rank = trainer.local_rank
    if isinstance(devices, str) and devices not in ("auto", "-1"):
        devices = [int(d) for d in devices.split(",") if d.strip()]
    if isinstance(devices, (list, tuple)) and devices:
        return int(devices[rank % len(devices)])
    return rank


def leave_on_cpu(trainer: Any) -> None:
    """What a run leaves behind on an accelerator, as Lightning's strategies do: the module and the optimizers'
    state on the CPU, the device's memory free. A model trained on a GPU is then used as a CPU module
    (``model(x)`` with a CPU tensor); the next run moves it to its device again. A sharded module stays where it
    is."""
    if getattr(trainer, "role_identities", {}).get("strategy") in SHARDED:
        return
    module = getattr(trainer, "module", None)
    if isinstance(module, torch.nn.Module):
        module.cpu()
    for optimizer in getattr(trainer, "optimizers", None) or []:
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.cpu()
