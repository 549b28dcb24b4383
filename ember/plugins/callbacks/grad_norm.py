"""``callback.grad-norm``: log gradient norms before each optimizer step."""

from __future__ import annotations

import math
from typing import Any

import torch

from ember.hookspecs import hookimpl


class GradNormMonitor:
    """Log the total gradient norm as ``grad_<p>_norm_total`` (and, with ``per_layer=True``, each parameter's
    as ``grad_<p>_norm/<name>``) in ``on_before_optimizer_step``: after loss scaling is undone and before
    clipping, so the value is the norm the optimizer would see unclipped.

    :param norm_type: the p of the p-norm (``2.0``; ``"inf"`` for the largest absolute value).
    :param per_layer: also log one norm per parameter (one logged value each: costs more per step).

    The norms stay on the device until a logger or the progress bar reads them.
    """

    identity = "callback.grad-norm"

    def __init__(self, norm_type: float | str = 2.0, per_layer: bool = False) -> None:
        norm = float(norm_type)
        if norm <= 0:
            raise ValueError(f"GradNormMonitor(norm_type={norm_type!r}): expected a positive number or 'inf'.")
        self.norm_type = norm
        self.per_layer = per_layer
        self._label = "inf" if math.isinf(norm) else f"{norm}"

    @hookimpl
    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        named = [(n, p) for n, p in module.named_parameters() if p.grad is not None and id(p) in owned]
        if not named:
            return
        grads = [p.grad.detach() for _, p in named]
        norms = torch._foreach_norm(grads, self.norm_type)
        total = torch.linalg.vector_norm(torch.stack([n.to(torch.float32) for n in norms]), self.norm_type)
        trainer.log(f"grad_{self._label}_norm_total", total, on_step=True, on_epoch=False)
        if self.per_layer:
            for (name, _), norm in zip(named, norms, strict=True):
                trainer.log(f"grad_{self._label}_norm/{name}", norm, on_step=True, on_epoch=False)
