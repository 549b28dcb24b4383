"""``callback.loss-check``: warn once when the training loss turns NaN or infinite.

On by default (it follows ``Trainer(log_every_n_steps=...)``; switch it off with
``block_plugins=["callback.loss-check"]``). To keep training free of host-device synchronisation, the loss
is read only on the steps where metrics are logged anyway (every ``log_every_n_steps`` optimizer steps), so
the warning names the step where a non-finite loss was first seen, at most ``log_every_n_steps - 1`` steps
after it appeared. To stop at the exact step instead, add the ``callback.nan-guard`` callback
(``callbacks=["nan-guard"]``, ``action="stop"`` or ``"raise"``); to find the operation that produced the
value, run with ``torch.autograd.set_detect_anomaly(True)`` (slow: for debugging only).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from ember.hookspecs import hookimpl


class NonFiniteLossWarning(UserWarning):
    """The training loss became NaN or infinite."""


class LossCheck:
    """Warns once per fit when a training loss read on a logging step is not finite."""

    identity = "callback.loss-check"

    def __init__(self) -> None:
        self.warned = False
        self.first_seen: int | None = None

    @hookimpl
    def on_train_start(self) -> None:
        self.warned, self.first_seen = False, None

    @hookimpl
    def on_train_batch_end(self, trainer: Any, outputs: Any, batch_idx: int) -> None:
        every = trainer.config.log_every_n_steps
        if self.warned or trainer.global_step % every or not isinstance(outputs, dict):
            return
        loss = outputs.get("loss")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return
        value = float(loss.detach())
        if math.isfinite(value):
            return
        self.warned, self.first_seen = True, trainer.global_step
        warnings.warn(
            f"the training loss is {value} at global step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {batch_idx}); it is read every log_every_n_steps={every} steps, so it turned non-finite at most "
            f"{every - 1} steps earlier. The weights are likely NaN from here on. Add callbacks=['nan-guard'] to "
            "stop (or skip the update) at the exact step, and run under torch.autograd.set_detect_anomaly(True) "
            "to find the operation that produced it.", NonFiniteLossWarning, stacklevel=2)
