"""``lightning.pytorch.accelerators.cpu``: ``CPUAccelerator`` (ember's ``accelerator.cpu``) and ``get_cpu_stats``."""

from __future__ import annotations

from typing import Any

import torch

from ember.lightning.pytorch.accelerators.accelerator import THROUGH_METHODS, Accelerator
from ember.lightning.seed import add_forwarders
from ember.plugins.accelerators.cpu import CPUAccelerator as _EmberCPU

__all__ = ["CPUAccelerator", "get_cpu_stats"]


def get_cpu_stats() -> dict[str, float]:
    """The CPU's use and the memory's, in percent (needs ``psutil``)."""
    from ember.lightning.pytorch.callbacks.monitors import _cpu_stats

    return dict(_cpu_stats())


class CPUAccelerator(Accelerator):
    """ember's ``accelerator.cpu``."""


    plugin_class = _EmberCPU

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The CPU's use, as :func:`get_cpu_stats`."""
        return get_cpu_stats()

    @staticmethod
    def parse_devices(devices: Any) -> int:
        return int(devices) if devices not in ("auto", None) else 1

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * CPUAccelerator.parse_devices(devices)


add_forwarders(CPUAccelerator, _EmberCPU, skip=THROUGH_METHODS)  # root_device
CPUAccelerator.stands_for = (_EmberCPU,)
