"""``ModelPruning``: prune weights with ``torch.nn.utils.prune`` as training goes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.utils.prune as prune

from ember.core.api.callback import Callback
from ember.core.errors import ConfigurationError

log = logging.getLogger("ember")
_FUNCTIONS: dict[str, Callable[..., Any]] = {"l1_unstructured": prune.l1_unstructured, "random_unstructured": prune.random_unstructured,
              "ln_structured": prune.ln_structured, "random_structured": prune.random_structured}
_GLOBAL: dict[str, Any] = {"l1_unstructured": prune.L1Unstructured, "random_unstructured": prune.RandomUnstructured}


class ModelPruning(Callback):
    """At the end of each training epoch (or validation epoch, ``prune_on_train_epoch_end=False``), prune
    ``amount`` (a fraction, a count, or ``amount(epoch)``; 0 skips the epoch) of the weights of
    ``parameters_to_prune`` (``[(module, "weight"), ...]``; default every ``parameter_names`` of every layer that
    has them, ``("weight", "bias")``).

    :param pruning_fn: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"`` (needs
        ``pruning_norm``), ``"random_structured"`` (both need ``pruning_dim``), or a function of
        ``(module, name, amount)`` from ``torch.nn.utils.prune``.
    :param use_global_unstructured: an unstructured method prunes over all the parameters together.
    :param apply_pruning: False, or ``apply_pruning(epoch)`` False, skips pruning.
    :param make_pruning_permanent: at the end of the fit, remove the masks and keep the pruned weights.
    :param use_lottery_ticket_hypothesis: after each pruning, reset the weights that remain to their values when
        the fit started (or ``use_lottery_ticket_hypothesis(epoch)``); ``resample_parameters`` draws new values
        instead.
    """

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(self, pruning_fn: Callable[..., Any] | str, parameters_to_prune: Sequence[tuple[Any, str]] = (),
                 parameter_names: list[str] | None = None, use_global_unstructured: bool = True,
                 amount: int | float | Callable[[int], int | float] = 0.5,
                 apply_pruning: bool | Callable[[int], bool] = True, make_pruning_permanent: bool = True,
                 use_lottery_ticket_hypothesis: bool | Callable[[int], bool] = True,
                 resample_parameters: bool = False, pruning_dim: int | None = None, pruning_norm: int | None = None,
                 verbose: int = 0, prune_on_train_epoch_end: bool = True) -> None:
        self._parameters_to_prune = list(parameters_to_prune)
        self._parameter_names = list(parameter_names or self.PARAMETER_NAMES)
        for name in self._parameter_names:
            if name not in self.PARAMETER_NAMES:
                raise ConfigurationError(f"ModelPruning(parameter_names=...): {name!r} is not one of "
                                         f"{self.PARAMETER_NAMES}.")
        if isinstance(pruning_fn, str):
            key = pruning_fn.lower()
            if key not in _FUNCTIONS:
                raise ConfigurationError(f"ModelPruning(pruning_fn={pruning_fn!r}): expected one of "
                                         f"{sorted(_FUNCTIONS)} or a function of torch.nn.utils.prune.")
            if key == "ln_structured" and pruning_norm is None:
                raise ConfigurationError("ModelPruning('ln_structured') needs pruning_norm.")
            if key.endswith("_structured") and pruning_dim is None:
                raise ConfigurationError(f"ModelPruning({key!r}) needs pruning_dim.")
            self._global = use_global_unstructured and key in _GLOBAL
            self._method: str | Callable[..., Any] = key
        else:
            self._global = False
            self._method = pruning_fn
        self.pruning_dim, self.pruning_norm = pruning_dim, pruning_norm
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._verbose = verbose
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._original: dict[tuple[int, str], torch.Tensor] = {}

    def _targets(self, pl_module: torch.nn.Module) -> list[tuple[torch.nn.Module, str]]:
        if self._parameters_to_prune:
            return self._parameters_to_prune
        return [(m, name) for m in pl_module.modules() for name in self._parameter_names
                if getattr(m, name, None) is not None and isinstance(getattr(m, name), torch.Tensor)
                and ({name, f"{name}_orig"} & {n for n, _ in m.named_parameters(recurse=False)})]

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._targets_cache = self._targets(pl_module)
            self._original = {(id(m), n): getattr(m, n).detach().clone() for m, n in self._targets_cache}

    def _call(self, value: Any, epoch: int) -> Any:
        return value(epoch) if callable(value) else value

    def apply_pruning(self, amount: int | float) -> None:
        """Prune ``amount`` of the parameters now."""
        targets = self._targets_cache
        if self._global:
            prune.global_unstructured(targets, pruning_method=_GLOBAL[str(self._method)], amount=amount)
            return
        for module, name in targets:
            if callable(self._method):
                self._method(module, name, amount=amount)
            elif self._method == "ln_structured":
                prune.ln_structured(module, name, amount=amount, n=self.pruning_norm, dim=self.pruning_dim)
            elif self._method == "random_structured":
                prune.random_structured(module, name, amount=amount, dim=self.pruning_dim)
            else:
                _FUNCTIONS[str(self._method)](module, name, amount=amount)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Set the weights that remain to their values when the fit started (or new random ones)."""
        with torch.no_grad():
            for module, name in self._targets_cache:
                orig = getattr(module, f"{name}_orig", None)
                if orig is None:
                    continue
                start = self._original[(id(module), name)]
                orig.copy_(torch.randn_like(start) * start.std() if self._resample_parameters else start)

    def _prune(self, trainer: Any, pl_module: Any) -> None:
        epoch = trainer.current_epoch
        amount = self._call(self.amount, epoch)
        if not amount or not self._call(self._apply_pruning, epoch):
            return
        self.apply_pruning(amount)
        if self._call(self._use_lottery_ticket_hypothesis, epoch):
            self.apply_lottery_ticket_hypothesis()
        if self._verbose:
            zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in self._targets_cache)
            total = sum(getattr(m, n).numel() for m, n in self._targets_cache)
            log.info("ModelPruning: epoch %d, %d of %d weights pruned (%.2f%%)", epoch, zeros, total,
                     100 * zeros / max(total, 1))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._prune_on_train_epoch_end:
            self._prune(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._prune_on_train_epoch_end and not trainer.sanity_checking:
            self._prune(trainer, pl_module)

    def make_pruning_permanent(self, module: torch.nn.Module) -> None:
        """Remove the pruning masks and keep the pruned weights as plain parameters."""
        for sub in module.modules():
            for name, _ in list(sub.named_parameters(recurse=False)):
                if name.endswith("_orig") and hasattr(sub, name[:-len("_orig")] + "_mask"):
                    prune.remove(sub, name[:-len("_orig")])

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(pl_module)


__all__ = ["ModelPruning"]
