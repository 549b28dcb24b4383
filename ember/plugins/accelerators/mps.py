"""``accelerator.mps``: Apple silicon GPUs through ``torch.backends.mps``."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins._shared.devices import device_count, torch_device_count
from ember.plugins.accelerators import leave_on_cpu


class MPSAccelerator:
    """The single MPS device (``mps:0``)."""

    role = "accelerator"
    identity = "accelerator.mps"

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 10 if device_count("mps") > 0 else None

    @staticmethod
    def check_available(config: Any) -> None:
        if device_count("mps") == 0:
            raise ConfigurationError("Trainer(accelerator='mps'): no MPS device is available here "
                                     "(torch.backends.mps.is_available() is False). Use accelerator='cpu' or 'auto'.")

    @hookimpl
    def configure(self, trainer: Any) -> None:
        if torch_device_count("mps") == 0:  # built while an MPS device was counted (see the CUDA accelerator)
            raise ConfigurationError(
                "Trainer(accelerator='mps') was built while an MPS device was counted, but torch sees none in this "
                "process (torch.backends.mps.is_available() is False). Run it on Apple silicon, or use "
                "accelerator='cpu'.")

    @hookimpl
    def root_device(self) -> torch.device:
        return torch.device("mps", 0)

    @hookimpl(trylast=True)  # after every other teardown, which may still use the module on the device
    def teardown(self, trainer: Any) -> None:
        leave_on_cpu(trainer)
