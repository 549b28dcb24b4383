"""``lightning.fabric.accelerators.cpu``: ``CPUAccelerator`` (:class:`ember.lightning.pytorch.accelerators.CPUAccelerator`)."""

from __future__ import annotations

from ember.lightning.pytorch.accelerators.cpu import CPUAccelerator

__all__ = ["CPUAccelerator"]
