"""``accelerator.cuda``: NVIDIA GPUs through ``torch.cuda``."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.accelerators import device_index, leave_on_cpu


class CUDAAccelerator:
    """One CUDA device per process: ``cuda:<local rank>``, or the ``devices=[...]`` entry for the rank."""

    role = "accelerator"
    identity = "accelerator.cuda"

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 20 if torch.cuda.is_available() else None

    @staticmethod
    def check_available(config: Any) -> None:
        if not torch.cuda.is_available():
            raise ConfigurationError("Trainer(accelerator='cuda'): no CUDA device is available here "
                                     "(torch.cuda.is_available() is False). Use accelerator='cpu' or 'auto'.")

    @hookimpl
    def root_device(self, trainer: Any) -> torch.device:
        return torch.device("cuda", device_index(trainer))

    @hookimpl
    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    @hookimpl(trylast=True)  # after every other teardown, which may still use the module on the device
    def teardown(self, trainer: Any) -> None:
        leave_on_cpu(trainer)
        torch.cuda.empty_cache()
