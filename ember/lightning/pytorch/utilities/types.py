"""``lightning.pytorch.utilities.types``: the type names Lightning code annotates with.

They are annotations: ember's loop accepts every shape they describe. ``LRSchedulerConfig`` is the record
``trainer.lr_scheduler_configs`` holds (:class:`ember.core.loop.optim.SchedulerConfig`, the same fields).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict, runtime_checkable

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from ember.core.loop.optim import SchedulerConfig as LRSchedulerConfig

#: What ``training_step`` and the other steps may return: a loss tensor, a dict with ``"loss"``, or None.
STEP_OUTPUT = torch.Tensor | Mapping[str, Any] | None
#: What ``train_dataloader()`` may return (a loader, or a collection of loaders).
TRAIN_DATALOADERS = Any
#: What ``val_dataloader()``/``test_dataloader()``/``predict_dataloader()`` may return.
EVAL_DATALOADERS = Any
#: ``trainer.validate()``/``test()``'s result: one dict per loader.
_EVALUATE_OUTPUT = list[Mapping[str, float]]
_PREDICT_OUTPUT = list[Any] | list[list[Any]]


@runtime_checkable
class LRSchedulerTypeProtocol(Protocol):
    """A learning-rate scheduler: anything with ``step()`` and ``state_dict``/``load_state_dict``."""

    optimizer: Optimizer

    def step(self, *args: Any, **kwargs: Any) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


#: The scheduler classes (types) Lightning names.
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerPLType = LRScheduler | ReduceLROnPlateau


class LRSchedulerConfigType(TypedDict, total=False):
    """The dict form of a scheduler in ``configure_optimizers``' return value."""

    scheduler: Any
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerConfig(TypedDict):
    """``{"optimizer": opt}``."""

    optimizer: Optimizer


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    """``{"optimizer": opt, "lr_scheduler": scheduler or its config dict, "monitor": ...}``."""

    optimizer: Optimizer
    lr_scheduler: Any
    monitor: str


#: Every return shape of ``configure_optimizers``.
OptimizerLRScheduler = (Optimizer | Sequence[Optimizer]
                        | tuple[Sequence[Optimizer], Sequence[LRSchedulerTypeUnion | LRSchedulerConfigType]]
                        | OptimizerConfig | OptimizerLRSchedulerConfig | Sequence[OptimizerConfig]
                        | Sequence[OptimizerLRSchedulerConfig] | None)


@runtime_checkable
class DistributedDataParallel(Protocol):
    """A module wrapped for data parallelism (``torch.nn.parallel.DistributedDataParallel`` and the like)."""

    module: torch.nn.Module

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


#: Lightning's name for the scheduler type tuple's union.
LRSchedulerType = LRSchedulerTypeUnion
ProcessGroup = Any
try:  # torchmetrics is optional
    from torchmetrics import Metric
except ImportError:  # pragma: no cover - without torchmetrics
    Metric = Any  # type: ignore[misc,assignment]

__all__ = ["STEP_OUTPUT", "DistributedDataParallel", "LRScheduler", "LRSchedulerConfig", "LRSchedulerConfigType",
           "LRSchedulerPLType", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion", "Metric",
           "Optimizer", "OptimizerConfig", "OptimizerLRScheduler", "OptimizerLRSchedulerConfig", "ProcessGroup",
           "ReduceLROnPlateau"]
