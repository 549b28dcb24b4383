"""``lightning.pytorch.accelerators.accelerator``: ``Accelerator``, the base of Lightning's accelerator classes, as
an ember plugin (see :mod:`ember.lightning.seed`).

A subclass's ``setup_device``, ``teardown`` and ``setup`` are called where Lightning calls them, ``is_available``
when the Trainer is built and ``get_device_stats`` by ``DeviceStatsMonitor``. ``parse_devices``,
``get_parallel_devices`` and ``auto_device_count`` are there for code that calls them.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.lightning.seed import SeedPlugin, base_hook
from ember.plugins.accelerators.cpu import CPUAccelerator as _EmberCPU
from ember.plugins.accelerators.cuda import CUDAAccelerator as _EmberCUDA
from ember.plugins.accelerators.mps import MPSAccelerator as _EmberMPS

__all__ = ["Accelerator"]

#: The ember hooks an Accelerator answers through Lightning's methods.
THROUGH_METHODS = frozenset({"setup_device", "teardown", "configure"})


class Accelerator(SeedPlugin):
    """Lightning's ``Accelerator``. A direct subclass names no device of its own: give ``root_device`` through
    the strategy, or subclass :class:`CPUAccelerator`/:class:`CUDAAccelerator`."""


    role = "accelerator"

    def setup_device(self, device: torch.device) -> None:
        """Prepare ``device`` (once per run, before the module is moved)."""
        self.delegate("setup_device", device=device)

    @base_hook
    def setup(self, trainer: Any) -> None:
        """Called at each run's ``setup`` when a subclass overrides it."""

    @base_hook
    def teardown(self) -> None:
        """Called at the end of each run when a subclass overrides it."""

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        return {}

    @staticmethod
    def parse_devices(devices: Any) -> Any:
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return []

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    def check_available(self, config: Any) -> None:
        if not self.is_available():
            raise ConfigurationError(f"Trainer(accelerator={type(self).__name__}()): {type(self).__name__}."
                                     "is_available() is False here.")
        super().check_available(config)

    @hookimpl(specname="setup_device")
    def _ember_setup_device(self, device: torch.device) -> None:
        self.setup_device(device)


Accelerator.stands_for = (_EmberCPU, _EmberCUDA, _EmberMPS)
