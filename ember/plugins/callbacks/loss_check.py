"""``callback.loss-check``: warn once when the training loss turns NaN or infinite.

On by default; ``Trainer(detect_nonfinite_loss=False)`` switches it off. To keep training free of host-device synchronisation, the loss
is looked at only on logging steps (every ``log_every_n_steps`` optimizer steps), without waiting for the
device (see :class:`LossCheck`), so
the warning names the step where a non-finite loss was first seen, at most ``log_every_n_steps - 1`` steps
after it appeared. To stop at the exact step instead, add the ``callback.nan-guard`` callback
(``callbacks=["nan-guard"]``, ``action="stop"`` or ``"raise"``); to find the operation that produced the
value, run with ``torch.autograd.set_detect_anomaly(True)`` (slow: for debugging only).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ember.core.hooks.options import boolean
from ember.hookspecs import hookimpl


class NonFiniteLossWarning(UserWarning):
    """The training loss became NaN or infinite."""


class LossCheck:
    """Warns once per fit when a training loss looked at on a logging step is not finite.

    No host-device synchronisation: on CUDA the check (two flags) is copied to the host asynchronously and
    read at a later logging step (or at the end of training) once the copy has landed; on the CPU there is
    nothing to wait for. When the fit ends, the last step's loss is looked at too (a run shorter than
    ``log_every_n_steps`` is checked once). Other devices are not checked.
    """

    identity = "callback.loss-check"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("detect_nonfinite_loss", type="bool", default=True, validate=boolean("detect_nonfinite_loss"),
                    switches="callback.loss-check",
                    help="warn once, naming the step, when the training loss turns NaN or infinite (looked at on "
                         "logging steps, without a host-device sync); False: off")

    def __init__(self) -> None:
        self.warned = False
        self.first_seen: int | None = None
        self._pending: tuple[torch.Tensor, Any, tuple[int, int, int]] | None = None
        #: The latest step's loss, looked at when the fit ends if its step was not a logging step.
        self._last: tuple[torch.Tensor, tuple[int, int, int]] | None = None

    @hookimpl
    def on_train_start(self) -> None:
        self.warned, self.first_seen, self._pending, self._last = False, None, None, None

    @hookimpl
    def on_train_batch_end(self, trainer: Any, outputs: Any, batch_idx: int) -> None:
        if self.warned:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else None
        if not isinstance(loss, torch.Tensor):
            return
        step = trainer.global_step
        if step % trainer.config.log_every_n_steps:
            self._last = (loss, (step, trainer.current_epoch, batch_idx))  # a reference only: nothing runs
            return
        self._last = None
        self._report(trainer, wait=False)
        self._look(trainer, loss, (step, trainer.current_epoch, batch_idx))

    def _look(self, trainer: Any, loss: torch.Tensor, where: tuple[int, int, int]) -> None:
        if loss.device.type not in ("cpu", "cuda"):  # (looked at here, not at every step)
            return
        loss = loss.detach()
        flags = torch.stack([torch.isnan(loss).any(), torch.isinf(loss).any()])
        if flags.device.type == "cpu":
            self._pending = (flags, None, where)
            self._report(trainer, wait=False)
            return
        host = torch.empty(2, dtype=torch.bool, pin_memory=True)
        host.copy_(flags, non_blocking=True)
        landed = torch.cuda.Event()
        landed.record()
        self._pending = (host, landed, where)

    @hookimpl
    def on_train_end(self, trainer: Any) -> None:
        # once per fit, so waiting costs nothing per step: the last logging step's flags, then the last loss
        self._report(trainer, wait=True)
        if self._last is not None and not self.warned:
            self._look(trainer, *self._last)
            self._report(trainer, wait=True)
        self._last = None

    def _report(self, trainer: Any, wait: bool) -> None:
        if self._pending is None or self.warned:
            return
        flags, landed, (step, epoch, batch_idx) = self._pending
        if landed is not None and not landed.query():
            if not wait:
                return
            landed.synchronize()
        self._pending = None
        nan, inf = (bool(f) for f in flags)
        if not (nan or inf):
            return
        every = trainer.config.log_every_n_steps
        self.warned, self.first_seen = True, step
        warnings.warn(
            f"the training loss is {'nan' if nan else 'infinite'} at global step {step} (epoch {epoch}, batch "
            f"{batch_idx}); it is looked at every log_every_n_steps={every} steps, so it turned non-finite at most "
            f"{every - 1} steps earlier. The weights are likely NaN from here on. Add callbacks=['nan-guard'] to "
            "stop (or skip the update) at the exact step, and run under torch.autograd.set_detect_anomaly(True) "
            "to find the operation that produced it.", NonFiniteLossWarning, stacklevel=2)
