"""``TrainerLike``: the trainer as a plugin sees it, the type of every hook's ``trainer`` argument.

A structural type (``typing.Protocol``): ``ember.Trainer`` satisfies it (mypy checks that in
``ember/core/api/trainer.py``, a test at run time), and so may a test double. It lists what a plugin may read
and call; anything else on the Trainer is internal and may change. Imports nothing at run time but typing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import os

    import torch


@runtime_checkable
class TrainerLike(Protocol):
    """What a hook implementation may use of the ``trainer`` it receives."""

    # -- the run's configuration and plugins ---------------------------------------------------------------
    #: The validated Trainer arguments (``ember.TrainerConfig``; plugins' own arguments read as attributes).
    config: Any
    #: The run's plugin manager (register helper plugins for the run's duration, ``origins``).
    plugin_manager: Any
    #: The hook table: ``trainer.hook.<name>`` is None for a hook nobody implements; ``trainer.hook.call(...)``.
    hook: Any
    #: Where the run is: ``state.fn`` (``"fit"``, ...), ``state.stage``, ``state.status``.
    state: Any

    # -- processes -----------------------------------------------------------------------------------------
    global_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    root_device: torch.device

    @property
    def is_global_zero(self) -> bool: ...

    # -- the model ---------------------------------------------------------------------------------------------
    #: The user's module, and the model as the strategy wrapped it.
    module: Any
    model: Any
    datamodule: Any
    optimizers: list[Any]
    lr_scheduler_configs: list[Any]

    @property
    def precision(self) -> str: ...

    # -- progress ----------------------------------------------------------------------------------------------
    num_training_batches: Any
    num_val_batches: Any
    num_test_batches: Any
    num_predict_batches: Any

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def batch_idx(self) -> int: ...

    @property
    def should_stop(self) -> bool: ...

    @should_stop.setter
    def should_stop(self, value: bool) -> None: ...

    @property
    def max_epochs(self) -> int | None: ...

    @property
    def max_steps(self) -> int: ...

    @property
    def accumulate_grad_batches(self) -> int: ...

    @property
    def estimated_stepping_batches(self) -> float: ...

    @property
    def training(self) -> bool: ...

    @property
    def validating(self) -> bool: ...

    @property
    def testing(self) -> bool: ...

    @property
    def predicting(self) -> bool: ...

    @property
    def sanity_checking(self) -> bool: ...

    # -- metrics, logging, files ---------------------------------------------------------------------------
    @property
    def callback_metrics(self) -> dict[str, Any]: ...

    @property
    def logged_metrics(self) -> dict[str, Any]: ...

    @property
    def progress_bar_metrics(self) -> dict[str, float]: ...

    @property
    def default_root_dir(self) -> str: ...

    @property
    def log_dir(self) -> str: ...

    @property
    def loggers(self) -> list[Any]: ...

    @property
    def callbacks(self) -> list[Any]: ...

    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean", sync_dist: bool = False,
            batch_size: int | None = None) -> None: ...

    def print(self, *args: Any, **kwargs: Any) -> None: ...

    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool = False) -> None: ...

    # -- across processes ------------------------------------------------------------------------------------
    def reduce(self, tensor: torch.Tensor, op: str = "mean") -> torch.Tensor: ...

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool: ...

    def barrier(self, name: str | None = None) -> None: ...

    def broadcast(self, obj: Any, src: int = 0) -> Any: ...

    def all_gather(self, tensor: torch.Tensor, sync_grads: bool = False) -> torch.Tensor: ...
