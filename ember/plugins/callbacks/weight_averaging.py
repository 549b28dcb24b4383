"""What the EMA and SWA callbacks share: an averaged copy of the module's tensors that lives in checkpoints.

The averaged copy is a list of detached tensors, one per parameter (and per floating-point buffer when
``use_buffers``), updated in place by torch's own averaging functions
(:func:`torch.optim.swa_utils.get_ema_multi_avg_fn`, :func:`~torch.optim.swa_utils.get_swa_multi_avg_fn`).
No second module is built, so nothing the module refers to (the trainer, data) is copied.

The copy is plugin state: it is written to every full checkpoint and put back on resume, so a resumed fit
ends with the same averaged weights, bit for bit, as one that never stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl

AvgFn = Callable[[list[torch.Tensor], list[torch.Tensor], Any], None]


class WeightAveraging:
    """Base of :class:`~ember.plugins.callbacks.ema.EMA` and :class:`~ember.plugins.callbacks.swa.SWA`.

    :param use_buffers: average floating-point buffers too (e.g. BatchNorm running statistics); integer
        buffers are copied as they are.
    :param validate_with_averaged: run validation with the averaged weights swapped in (swapped back,
        bit for bit, at ``on_validation_epoch_end``).
    :param apply_at_end: when training ends, leave the averaged weights in the module. The training weights
        are kept in the callback's state, so a checkpoint written afterwards still resumes exactly.
    """

    identity = "callback.weight-averaging"

    def __init__(self, use_buffers: bool, validate_with_averaged: bool, apply_at_end: bool) -> None:
        self.use_buffers = use_buffers
        self.validate_with_averaged = validate_with_averaged
        self.apply_at_end = apply_at_end
        #: The averaged tensors, in the order of :meth:`_tensors`; None until the fit starts.
        self.averaged: list[torch.Tensor] | None = None
        #: How many times the average was updated.
        self.n_averaged = 0
        self._backup: list[torch.Tensor] | None = None  # the training weights while the averaged ones are in
        self._pending: dict[str, Any] | None = None  # state loaded before the fit built its tensors

    # -- what is averaged ----------------------------------------------------------------------------------
    def _tensors(self, module: torch.nn.Module) -> list[torch.Tensor]:
        tensors = [p.detach() for p in module.parameters()]
        if self.use_buffers:
            tensors += [b.detach() for b in module.buffers()]
        return tensors

    def _update(self, module: torch.nn.Module, avg_fn: AvgFn) -> None:
        """Fold the module's current tensors into the average (the first update copies them)."""
        current = self._tensors(module)
        if self.averaged is None:
            raise ConfigurationError(f"{type(self).__name__} updated before the fit started.")
        if self.n_averaged == 0:
            torch._foreach_copy_(self.averaged, current)
        else:
            floats = [(a, c) for a, c in zip(self.averaged, current, strict=True) if a.is_floating_point()]
            if floats:
                avg_fn([a for a, _ in floats], [c for _, c in floats], self.n_averaged)
            for a, c in zip(self.averaged, current, strict=True):
                if not a.is_floating_point():
                    a.copy_(c)
        self.n_averaged += 1

    @contextlib.contextmanager
    def averaged_weights(self, module: torch.nn.Module) -> Iterator[None]:
        """Inside the block the module holds the averaged weights; they are swapped back, exactly, on exit."""
        self._swap_in(module)
        try:
            yield
        finally:
            self._swap_out(module)

    @torch.no_grad()
    def _swap_in(self, module: torch.nn.Module) -> None:
        if self.averaged is None or self.n_averaged == 0 or self._backup is not None:
            return
        current = self._tensors(module)
        self._backup = [t.clone() for t in current]
        torch._foreach_copy_(current, self.averaged)

    @torch.no_grad()
    def _swap_out(self, module: torch.nn.Module) -> None:
        if self._backup is None:
            return
        torch._foreach_copy_(self._tensors(module), self._backup)
        self._backup = None

    # -- the fit -------------------------------------------------------------------------------------------
    @hookimpl
    def on_fit_start(self, trainer: Any, module: Any) -> None:
        tensors = self._tensors(module)
        self.averaged = [t.clone() for t in tensors]
        self.n_averaged = 0
        self._backup = None
        pending, self._pending = self._pending, None
        if pending is not None:
            self._apply_state(module, pending, tensors)

    def _apply_state(self, module: torch.nn.Module, state: dict[str, Any], tensors: list[torch.Tensor]) -> None:
        saved = state["averaged"]
        if len(saved) != len(tensors) or any(s.shape != t.shape for s, t in zip(saved, tensors, strict=True)):
            raise ConfigurationError(
                f"{type(self).__name__}: the checkpoint's averaged weights ({len(saved)} tensors) do not match the "
                f"module ({len(tensors)} tensors); resume with the same model and use_buffers setting.")
        assert self.averaged is not None
        with torch.no_grad():
            torch._foreach_copy_(self.averaged, [s.to(t.device) for s, t in zip(saved, tensors, strict=True)])
            if state.get("training_weights") is not None:  # saved after the averaged weights were applied
                torch._foreach_copy_(tensors, [s.to(t.device) for s, t in
                                               zip(state["training_weights"], tensors, strict=True)])
        self.n_averaged = int(state["n_averaged"])

    @hookimpl
    def on_validation_start(self, trainer: Any, module: Any) -> None:
        if self.validate_with_averaged and trainer.state.get("fn") == "fit":
            self._swap_in(module)

    @hookimpl
    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        # Swapped back before on_validation_end, where checkpoint callbacks write the training weights.
        if self.validate_with_averaged and trainer.state.get("fn") == "fit":
            self._swap_out(module)

    @hookimpl
    def on_exception(self, trainer: Any, module: Any) -> None:
        if trainer.state.get("fn") == "fit" and self._backup is not None and not self.apply_at_end:
            self._swap_out(module)

    @hookimpl
    def on_train_end(self, trainer: Any, module: Any) -> None:
        if self.apply_at_end:
            self._swap_in(module)

    # -- checkpoints ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.averaged is None:
            return dict(self._pending or {})
        return {"averaged": [t.detach().clone() for t in self.averaged], "n_averaged": self.n_averaged,
                "training_weights": None if self._backup is None else [t.clone() for t in self._backup]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        # A resumed fit loads plugin state before on_fit_start builds the tensors: keep it until then.
        self._pending = dict(state)
