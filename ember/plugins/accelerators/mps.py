"""``accelerator.mps``: Apple silicon GPUs through ``torch.backends.mps``."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.accelerators import leave_on_cpu


def _available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


class MPSAccelerator:
    """The single MPS device (``mps:0``)."""

    role = "accelerator"
    identity = "accelerator.mps"

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 10 if _available() else None

    @staticmethod
    def check_available(config: Any) -> None:
        if not _available():
            raise ConfigurationError("Trainer(accelerator='mps'): no MPS device is available here "
                                     "(torch.backends.mps.is_available() is False). Use accelerator='cpu' or 'auto'.")

    @hookimpl
    def root_device(self) -> torch.device:
        return torch.device("mps", 0)

    @hookimpl(trylast=True)  # after every other teardown, which may still use the module on the device
    def teardown(self, trainer: Any) -> None:
        leave_on_cpu(trainer)
