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


def requested_indices(devices: Any, count: int) -> list[int] | None:
    """The device indices ``Trainer(devices=...)`` names on a machine of ``count`` devices: ``2`` and ``"2"`` are
    ``[0, 1]``, ``[2]`` and ``"2,"`` are ``[2]``, ``"0, 2"`` is ``[0, 2]``, ``"auto"`` and ``-1`` every device. None
    for a value that names no indices (its own check reports it)."""
    if isinstance(devices, bool):
        return None
    if devices in ("auto", None, -1, "-1"):
        return list(range(count))
    if isinstance(devices, str):
        parts = [d.strip() for d in devices.split(",") if d.strip()]
        if not all(p.isdigit() for p in parts):
            return None
        if len(parts) == 1 and not devices.strip().endswith(","):
            devices = int(parts[0])
        else:
            return [int(p) for p in parts]
    if isinstance(devices, int):
        return list(range(devices)) if devices > 0 else None
    if isinstance(devices, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
        return [int(d) for d in devices]
    return None


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
