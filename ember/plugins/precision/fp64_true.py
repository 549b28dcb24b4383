"""``precision.64-true``: parameters, inputs and new tensors in float64."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.plugins.precision import cast_floats, default_dtype


class FP64True:
    role = "precision"
    identity = "precision.64-true"
    dtype = torch.float64

    @hookimpl
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(self.dtype)

    @hookimpl
    def convert_input(self, data: Any) -> Any:
        return cast_floats(data, self.dtype)

    @hookimpl(wrapper=True)
    def step(self) -> Generator[None, Any, Any]:
        with default_dtype(self.dtype):
            return (yield)
