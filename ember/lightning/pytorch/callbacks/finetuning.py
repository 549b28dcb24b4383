"""``BaseFinetuning`` and ``BackboneFinetuning``: train a model's parts from frozen to trainable over epochs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ember.core.api.callback import Callback
from ember.core.errors import ConfigurationError

log = logging.getLogger("ember")
Modules = torch.nn.Module | Iterable[Any]


def multiplicative(epoch: int) -> float:
    """The default ``lambda_func`` of :class:`BackboneFinetuning`: the backbone's learning rate grows by 1.5 a
    epoch."""
    return 1.5


class BaseFinetuning(Callback):
    """Subclass and define ``freeze_before_training(pl_module)`` (called when the fit sets up) and
    ``finetune_function(pl_module, epoch, optimizer)`` (called at the start of every training epoch, for each
    optimizer), using the static helpers to freeze modules and to unfreeze them into a new parameter group.

    The parameter groups added are kept in checkpoints (by parameter name), so a resumed fit gets them back."""

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    # -- to override --------------------------------------------------------------------------------------
    def freeze_before_training(self, pl_module: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(pl_module)")

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(pl_module, epoch, optimizer)")

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[torch.nn.Module]:
        """The leaf modules (those without children) and the modules with their own parameters, of ``modules``
        (a module, or nested iterables of modules)."""
        if isinstance(modules, torch.nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable):
            found: list[torch.nn.Module] = []
            for m in modules:
                found.extend(BaseFinetuning.flatten_modules(m))
            return found
        return [m for m in modules.modules() if not list(m.children()) or list(m.parameters(recurse=False))]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterable[torch.nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad`` (BatchNorm's left out unless
        ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """``requires_grad = True`` for every parameter of ``modules``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: torch.nn.Module) -> None:
        """Freeze one module's own parameters (a BatchNorm also stops updating its statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules`` (BatchNorm layers stay trainable with ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[Any]) -> list[Any]:
        """``params`` less those ``optimizer`` already holds (with a warning naming them)."""
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = list(params)
        kept = [p for p in params if id(p) not in held]
        if len(kept) != len(params):
            log.warning("%d parameters are already in the optimizer and are not added again.", len(params) - len(kept))
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(modules: Modules, optimizer: torch.optim.Optimizer, lr: float | None = None,
                                     initial_denom_lr: float = 10.0, train_bn: bool = True) -> None:
        """Make ``modules`` trainable and add their parameters to ``optimizer`` as a new group, at ``lr`` (default:
        the first group's learning rate divided by ``initial_denom_lr``)."""
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True))
        if params:
            optimizer.add_param_group({"params": params, "lr": group_lr})

    # -- hooks ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = dict(state_dict.get("internal_optimizer_metadata", {}))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.freeze_before_training(pl_module)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._restarting:
            return
        named = dict(pl_module.named_parameters())
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(opt_idx)
            if groups:
                optimizer.param_groups = [dict(g, params=[named[n] for n in g["params"]]) for g in groups]
        self._restarting = False

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        names = {p: n for n, p in pl_module.named_parameters()}
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            groups = [dict({k: v for k, v in g.items() if k != "params"}, params=[names[p] for p in g["params"]])
                      for g in optimizer.param_groups]
            stored = self._internal_optimizer_metadata.get(opt_idx)
            if stored is None:
                self._internal_optimizer_metadata[opt_idx] = groups
            elif len(groups) != before:
                stored.extend(groups[before:])


class BackboneFinetuning(BaseFinetuning):
    """Freeze ``pl_module.backbone`` until epoch ``unfreeze_backbone_at_epoch``; then add it to the optimizer at
    ``backbone_initial_lr`` (default: the current rate times ``backbone_initial_ratio_lr``), and from then on set
    its rate to ``lambda_func(epoch + 1)`` times the previous one, but never above the other groups' rate when
    ``should_align``."""

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, lambda_func: Callable[[int], float] = multiplicative,
                 backbone_initial_ratio_lr: float = 10e-2, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True,
                 verbose: bool = False, rounding: int = 12) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")
        super().load_state_dict(state_dict)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not isinstance(getattr(pl_module, "backbone", None), torch.nn.Module):
            raise ConfigurationError("BackboneFinetuning needs the module to have a `backbone` attribute that is an "
                                     "nn.Module.")
        super().on_fit_start(trainer, pl_module)

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            lr = self.backbone_initial_lr if self.backbone_initial_lr is not None \
                else current_lr * self.backbone_initial_ratio_lr
            self.previous_backbone_lr = lr
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, lr, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            lr = current_lr if self.should_align and lr > current_lr else lr
            optimizer.param_groups[-1]["lr"] = lr
            self.previous_backbone_lr = lr
        else:
            return
        if self.verbose:
            log.info("current lr: %s, backbone lr: %s", round(current_lr, self.rounding), round(lr, self.rounding))


__all__ = ["BackboneFinetuning", "BaseFinetuning"]
