"""``callback.nan-guard``: catch a NaN or infinite loss (and gradients) before it reaches the weights."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl

log = logging.getLogger("ember")
_ACTIONS = ("stop", "skip", "raise")


class NanGuard:
    """Check each training loss (and, with ``check_grads``, the gradients before each optimizer step) for NaN
    or infinity. On a hit, the message names the epoch, the batch and the global step, and ``action`` says
    what happens:

    * ``"stop"`` (default): the bad update is not applied and training stops after this batch.
    * ``"skip"``: the bad update is not applied and training goes on (each skip is logged and kept in
      ``skipped``).
    * ``"raise"``: a ``FloatingPointError`` ends the run.

    A skipped loss skips that batch's backward (like ``training_step`` returning None: the optimizer step still
    runs and counts in ``global_step``, as in Lightning, but finds no gradient of that batch); skipped gradients
    are dropped (set to None) so the optimizer leaves those parameters as they are.
    The gradient check is off under ``16-mixed``, whose gradient scaler already skips such steps, and the
    loss check covers automatic optimization only.

    Checking reads a flag from the device each step: a host-device synchronisation per step, the price of
    deciding before the update.
    """

    identity = "callback.nan-guard"

    def __init__(self, action: str = "stop", check_grads: bool = True) -> None:
        if action not in _ACTIONS:
            raise ConfigurationError(f"NanGuard(action={action!r}) is invalid: expected one of {', '.join(_ACTIONS)}.")
        self.action = action
        self.check_grads = check_grads
        self.skipped: list[dict[str, Any]] = []

    def _where(self, trainer: Any, batch_idx: int) -> str:
        return f"epoch {trainer.current_epoch}, batch {batch_idx}, global step {trainer.global_step}"

    def _hit(self, trainer: Any, what: str, batch_idx: int) -> None:
        where = self._where(trainer, batch_idx)
        message = f"{what} at {where}"
        if self.action == "raise":
            raise FloatingPointError(message + ". (NanGuard action='raise'; use 'skip' to carry on without "
                                     "the update, or 'stop' to end training cleanly.)")
        self.skipped.append({"epoch": trainer.current_epoch, "batch_idx": batch_idx,
                             "global_step": trainer.global_step, "what": what})
        if self.action == "stop":
            trainer.should_stop = True
            log.error("NanGuard: %s; the update was not applied and training stops.", message)
        else:
            log.warning("NanGuard: %s; the update was skipped.", message)

    @hookimpl(wrapper=True)
    def step(self, trainer: Any, module: Any, batch_idx: int, stage: str) -> Generator[None, Any, Any]:
        out = yield
        if stage != "train" or out is None or not getattr(module, "automatic_optimization", True):
            return out
        loss = out if isinstance(out, torch.Tensor) else out.get("loss") if isinstance(out, dict) else None
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            self._hit(trainer, f"the training loss is {loss.detach().float().mean().item()}", batch_idx)
            return None
        return out

    @hookimpl
    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        if not self.check_grads or trainer.precision == "16-mixed":
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return
        norms = torch._foreach_norm([p.grad.detach() for p in params], float("inf"))
        finite = torch.isfinite(torch.stack([n.float() for n in norms]))
        if bool(finite.all()):
            return
        names = {id(p): n for n, p in module.named_parameters()}
        bad = [names.get(id(p), "?") for p, ok in zip(params, finite.tolist(), strict=True) if not ok]
        listed = ", ".join(repr(n) for n in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        self._hit(trainer, f"non-finite gradients in {listed}", trainer.batch_idx)
        for p in params:
            p.grad = None
