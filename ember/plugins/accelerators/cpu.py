"""``accelerator.cpu``: computation on the host."""

from __future__ import annotations

import torch

from ember.hookspecs import hookimpl


class CPUAccelerator:
    """Runs on the CPU; always available, the lowest ``"auto"`` priority."""

    role = "accelerator"
    identity = "accelerator.cpu"

    @staticmethod
    def auto_select(config: object) -> int:
        return 0

    @hookimpl
    def root_device(self) -> torch.device:
        return torch.device("cpu")
