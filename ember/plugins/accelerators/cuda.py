"""``accelerator.cuda``: NVIDIA GPUs through ``torch.cuda``."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins._shared.devices import device_count, torch_device_count
from ember.plugins.accelerators import device_index, leave_on_cpu, requested_indices


class CUDAAccelerator:
    """One CUDA device per process: ``cuda:<local rank>``, or the ``devices=[...]`` entry for the rank."""

    role = "accelerator"
    identity = "accelerator.cuda"

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 20 if device_count("cuda") > 0 else None

    @staticmethod
    def check_available(config: Any) -> None:
        """When the Trainer is built: CUDA devices are counted (``device_count("cuda")``, nothing is initialised)
        and those ``devices=`` names must be among them."""
        count = device_count("cuda")
        if count == 0:
            raise ConfigurationError("Trainer(accelerator='cuda'): no CUDA device is available here "
                                     "(torch.cuda.is_available() is False). Use accelerator='cpu' or 'auto'.")
        wanted = requested_indices(config.devices, count)
        if wanted and max(wanted) >= count:
            raise ConfigurationError(
                f"Trainer(accelerator='cuda', devices={config.devices!r}) asks for CUDA devices {wanted}, but this "
                f"machine has {count}: {list(range(count))}. Ask for fewer, or name the indices with devices=[...].")

    @hookimpl
    def configure(self, trainer: Any) -> None:
        # A count routed at construction (a test faking GPUs) does not make devices: say so before any process
        # is started or any tensor moved, rather than failing inside torch.
        if torch_device_count("cuda") == 0:
            raise ConfigurationError(
                f"Trainer(accelerator='cuda', devices={trainer.config.devices!r}) was built while CUDA devices were "
                "counted, but torch sees none in this process (torch.cuda.device_count() is 0), so nothing can run "
                "on them. Run it where a GPU is visible, or use accelerator='cpu'.")

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
