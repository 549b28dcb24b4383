"""Accelerators: where tensors live (``accelerator.cpu``, ``accelerator.cuda``, ``accelerator.mps``)."""

from __future__ import annotations

from typing import Any


def device_index(trainer: Any) -> int:
    """The device index for this process from ``Trainer(devices=...)`` and the local rank."""
    devices = trainer.config.devices
    rank = trainer.local_rank
    if isinstance(devices, str) and devices not in ("auto", "-1"):
        devices = [int(d) for d in devices.split(",") if d.strip()]
    if isinstance(devices, (list, tuple)) and devices:
        return int(devices[rank % len(devices)])
    return rank
