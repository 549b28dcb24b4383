"""``precision.16-mixed``: float32 parameters, the step in float16 under ``torch.autocast``, and a
``torch.amp.GradScaler`` that scales the loss, unscales before ``on_before_optimizer_step`` and skips steps
with inf/NaN gradients. Works on CPU too (torch's CPU autocast and scaler support float16)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.plugins.precision import autocast_device_type


class FP16Mixed:
    role = "precision"
    identity = "precision.16-mixed"
    dtype = torch.float16

    def __init__(self, scaler: torch.amp.GradScaler | None = None) -> None:
        self._scaler: torch.amp.GradScaler | None = scaler
        self._device_type = "cpu"

    @property
    def scaler(self) -> torch.amp.GradScaler:
        """The gradient scaler; made for the run's device type at ``setup_device`` unless one was given."""
        if self._scaler is None:
            self._scaler = torch.amp.GradScaler(self._device_type)
        return self._scaler

    @hookimpl
    def setup_device(self, device: torch.device) -> None:
        self._device_type = autocast_device_type(device)
        if self._scaler is None:
            self._scaler = torch.amp.GradScaler(self._device_type)

    @hookimpl
    def mixed_precision_dtype(self) -> torch.dtype:
        return self.dtype

    @hookimpl(wrapper=True)
    def step(self) -> Generator[None, Any, Any]:
        with torch.autocast(self._device_type, dtype=self.dtype):
            return (yield)

    @hookimpl
    def backward(self, loss: torch.Tensor) -> bool:
        self.scaler.scale(loss).backward()
        return True

    @hookimpl
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> bool:
        self.scaler.unscale_(optimizer)
        return True

    @hookimpl
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        self.scaler.step(optimizer)
        self.scaler.update()
        return True

    # -- state: kept in checkpoint["plugins"][identity] by core.checkpoint ---------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self._scaler.state_dict()} if self._scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
