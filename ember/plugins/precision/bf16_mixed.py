"""``precision.bf16-mixed``: float32 parameters, the step's matmuls in bfloat16 under ``torch.autocast``."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.plugins.precision import autocast_device_type


class BF16Mixed:
    role = "precision"
    identity = "precision.bf16-mixed"
    dtype = torch.bfloat16

    @hookimpl
    def mixed_precision_dtype(self) -> torch.dtype:
        return self.dtype

    @hookimpl(wrapper=True)
    def step(self, trainer: Any) -> Generator[None, Any, Any]:
        with torch.autocast(autocast_device_type(trainer.root_device), dtype=self.dtype):
            return (yield)
