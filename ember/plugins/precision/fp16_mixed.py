"""``precision.16-mixed``: float32 parameters, the step in float16 under ``torch.autocast``, and a
``torch.amp.GradScaler`` that scales the loss, unscales before ``on_before_optimizer_step`` and skips steps
with inf/NaN gradients. Works on CPU too (torch's CPU autocast and scaler support float16).

Zero host syncs per step with a fused optimizer: an optimizer built with ``fused=True`` whose class takes the
loss scale and the inf flag as device tensors (``torch.optim.Adam``, ``AdamW`` and ``SGD``, and ``Adagrad`` from
torch 2.12, whose fused kernel runs only on the CPU before that: they set ``_step_supports_amp_scaling``) gets
both from the scaler on the device and skips an overflowing step inside its kernel. Every other optimizer needs
the scaler to read the inf flag on the host (``.item()``) to decide whether to step: one synchronisation per
optimizer step. The plugin says once per optimizer which case applies
(log level INFO, DEBUG for CPU runs, where a sync costs nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.loop.optim import needs_closure
from ember.hookspecs import hookimpl
from ember.plugins.precision import autocast_device_type

log = logging.getLogger("ember")


def scales_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """True if ``optimizer.step`` takes ``grad_scale``/``found_inf`` tensors (fused Adam, AdamW, SGD, and
    Adagrad where torch says so): the scaler then never reads the inf flag on the host."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


class FP16Mixed:
    role = "precision"
    identity = "precision.16-mixed"
    dtype = torch.float16

    def __init__(self, scaler: torch.amp.GradScaler | None = None) -> None:
        self._scaler: torch.amp.GradScaler | None = scaler
        self._device_type = "cpu"
        self._told: set[int] = set()  # optimizers whose sync behaviour was logged

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
    def optimizer_step(self, trainer: Any, optimizer: torch.optim.Optimizer) -> bool:
        training = trainer.loop.training
        closure = training.step_closure
        if closure is not None and needs_closure(optimizer):
            raise ConfigurationError(
                f"precision='16-mixed' cannot step {type(optimizer).__name__}, which evaluates the loss itself "
                "(the gradient scaler steps an optimizer once per backward): AMP and the LBFGS optimizer are not "
                "compatible. Use precision='32-true' or 'bf16-mixed', or another optimizer.")
        if id(optimizer) not in self._told:
            self._tell(optimizer)
        # A fused optimizer gets optimizer.grad_scale / optimizer.found_inf (device tensors) from the scaler and
        # skips an overflowing step in its kernel; update() adjusts the scale on the device too.
        if closure is not None:  # the scaler steps without a closure: training step and backward run first
            closure()
        training.step_result = self.scaler.step(optimizer)  # None when the scaler skipped the step
        self.scaler.update()
        return True

    def _tell(self, optimizer: torch.optim.Optimizer) -> None:
        self._told.add(id(optimizer))
        level = logging.DEBUG if self._device_type == "cpu" else logging.INFO
        name = type(optimizer).__name__
        if scales_on_device(optimizer):
            log.log(level, "16-mixed: %s is fused and takes the loss scale and the inf flag on the device: no "
                    "host synchronisation per step", name)
        else:
            log.log(level, "16-mixed: %s reads the gradient scaler's inf flag on the host (one synchronisation per "
                    "step); torch.optim.Adam, AdamW or SGD with fused=True avoid it", name)

    # -- state: kept in checkpoint["plugins"][identity] by core.checkpoint ---------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self._scaler.state_dict()} if self._scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
