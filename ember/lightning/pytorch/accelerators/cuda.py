"""``lightning.pytorch.accelerators.cuda``: ``CUDAAccelerator`` (ember's ``accelerator.cuda``).

Its ``is_available`` and ``auto_device_count`` count through this module's ``num_cuda_devices`` when called, which
asks :mod:`ember.lightning.fabric.accelerators.cuda`'s: code that fakes a GPU count by patching either is heard,
by these methods and by a Trainer taken through Lightning's names.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.lightning.pytorch.accelerators.accelerator import THROUGH_METHODS, Accelerator
from ember.lightning.seed import add_forwarders
from ember.plugins.accelerators.cuda import CUDAAccelerator as _EmberCUDA

__all__ = ["CUDAAccelerator", "num_cuda_devices"]


def num_cuda_devices() -> int:
    """The CUDA devices this process sees, as :func:`ember.lightning.fabric.accelerators.cuda.num_cuda_devices`
    says when called."""
    from ember.lightning.fabric.accelerators import cuda

    return int(cuda.num_cuda_devices())


class CUDAAccelerator(Accelerator):
    """ember's ``accelerator.cuda``: ``cuda:<local rank>`` (or the ``devices=[...]`` entry of the rank)."""


    plugin_class = _EmberCUDA

    def teardown(self) -> None:
        self.delegate("teardown")

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return dict(torch.cuda.memory_stats(device))

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        if isinstance(devices, int):
            devices = list(range(devices))
        return [torch.device("cuda", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return num_cuda_devices()

    @staticmethod
    def is_available() -> bool:
        return num_cuda_devices() > 0


add_forwarders(CUDAAccelerator, _EmberCUDA, skip=THROUGH_METHODS)  # root_device
CUDAAccelerator.stands_for = (_EmberCUDA,)
