"""``lightning.pytorch.accelerators.mps``: ``MPSAccelerator`` (ember's ``accelerator.mps``, Apple silicon GPUs)."""

from __future__ import annotations

from typing import Any

import torch

from ember.lightning.pytorch.accelerators.accelerator import THROUGH_METHODS, Accelerator
from ember.lightning.seed import add_forwarders
from ember.plugins._shared.devices import torch_device_count
from ember.plugins.accelerators.mps import MPSAccelerator as _EmberMPS

__all__ = ["MPSAccelerator"]


class MPSAccelerator(Accelerator):
    """ember's ``accelerator.mps``: Apple silicon GPUs (``mps:0``). ``lightning.fabric.accelerators.mps``'s
    ``MPSAccelerator`` is this class: patching its ``is_available`` fakes an MPS device for a Trainer taken
    through Lightning's names."""


    plugin_class = _EmberMPS

    def teardown(self) -> None:
        self.delegate("teardown")

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("mps", 0)] * (devices if isinstance(devices, int) else len(devices))

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return torch_device_count("mps") > 0


add_forwarders(MPSAccelerator, _EmberMPS, skip=THROUGH_METHODS)  # root_device
MPSAccelerator.stands_for = (_EmberMPS,)
