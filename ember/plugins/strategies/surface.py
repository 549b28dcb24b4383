"""What code holding a strategy object reads from it: ``trainer.strategy.root_device``, ``.lightning_module``,
``.connect(model)``, ``.backward(loss, optimizer)``, ... with Lightning's names and meaning.

Each answer is read from the Trainer that selected the strategy (:func:`ember.core.api.trainer_properties.
trainer_of`) when it is asked for, so nothing is kept up to date during a run. A strategy plugin that is no
Trainer's (made by hand, never passed to one) answers as a fresh Lightning strategy does: the CPU, no module.

The names are Lightning's, and some are also names of ember's role hooks: ``root_device``, ``backward`` and the
collectives ``reduce``, ``all_gather``, ``broadcast``, ``barrier`` and ``reduce_boolean_decision``. Here they are
Lightning's attributes and methods, with Lightning's arguments (``strategy.barrier()``, ``strategy.reduce(tensor,
reduce_op="sum")``, each a collective that runs the Trainer's hook); a strategy plugin built on this class answers
those hooks under other method names, marked ``@ember.hookimpl(specname="reduce")``. Its other role hooks
(``process_dataloader``, ``setup_environment``, ``model_sharded_context``, ``save_checkpoint``, ...) take ember's
arguments, the trainer first, and are not part of this surface.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ember.core.api.role_plugins import trainer_of
from ember.core.errors import ConfigurationError

#: Lightning's ``reduce_op`` names -> the ``reduce`` hook's.
_OPS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


class StrategySurface:
    """The base of ember's strategy plugins: Lightning's ``Strategy`` attributes, read from the selecting Trainer."""

    @property
    def root_device(self) -> torch.device:
        """The device this process runs on (``trainer.root_device``)."""
        trainer = trainer_of(self)
        return trainer.root_device if trainer is not None else torch.device("cpu")

    @property
    def lightning_module(self) -> Any:
        """The user's module (``trainer.lightning_module``), once a run or :meth:`connect` gave one."""
        trainer = trainer_of(self)
        return trainer.module if trainer is not None else None

    @property
    def model(self) -> Any:
        """What runs the steps: the module, or the strategy's wrapper of it (``DistributedDataParallel``, ...)."""
        trainer = trainer_of(self)
        return None if trainer is None else trainer.model if trainer.model is not None else trainer.module

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The run's optimizers (``trainer.optimizers``)."""
        trainer = trainer_of(self)
        return trainer.optimizers if trainer is not None else []

    @optimizers.setter
    def optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self._own_trainer("optimizers").optimizers = list(optimizers)

    @property
    def precision_plugin(self) -> Any:
        """The run's precision plugin (``trainer.precision_plugin``)."""
        return self._role("precision")

    @property
    def accelerator(self) -> Any:
        """The run's accelerator plugin (``trainer.accelerator``)."""
        return self._role("accelerator")

    @property
    def checkpoint_io(self) -> Any:
        """The run's checkpoint storage plugin."""
        return self._role("checkpoint_io")

    @property
    def global_rank(self) -> int:
        return self._rank("global_rank", 0)

    @property
    def local_rank(self) -> int:
        return self._rank("local_rank", 0)

    @property
    def node_rank(self) -> int:
        return self._rank("node_rank", 0)

    @property
    def world_size(self) -> int:
        return self._rank("world_size", 1)

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    def connect(self, model: torch.nn.Module) -> None:
        """Make ``model`` the Trainer's module (``trainer.lightning_module``), as a run does when it starts."""
        trainer = self._own_trainer("connect")
        trainer.module = trainer.model = model

    def backward(self, closure_loss: torch.Tensor, optimizer: torch.optim.Optimizer | None, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
        """The loop's backward, inside a fit: ``on_before_backward``, the precision's backward (further arguments go
        to ``Tensor.backward``), ``on_after_backward``; the loss is returned."""
        trainer = self._own_trainer("backward")
        trainer.loop.training.backward(closure_loss, optimizer, *args, **kwargs)
        return closure_loss

    def tensor_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Where and in which dtype tensors made inside are created: ``trainer.init_module(empty_init)``."""
        return self._own_trainer("tensor_init_context").init_module(empty_init=empty_init)  # type: ignore[no-any-return]

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The module's ``state_dict()``, as a checkpoint holds it."""
        module = self.lightning_module
        return module.state_dict() if module is not None else {}

    # -- collectives, with Lightning's arguments: call each on every process ------------------------------------
    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """``tensor`` reduced over the processes (``"mean"``, ``"sum"``, ``"max"``, ``"min"``; a ``ReduceOp``
        too); a tensor of one process comes back as it is."""
        op = str(reduce_op).lower().rsplit(".", 1)[-1]
        if op not in _OPS:
            raise ValueError(f"{type(self).__name__}.reduce(reduce_op={reduce_op!r}): expected one of "
                             f"{', '.join(sorted(_OPS))}.")
        return self._collective("reduce", tensor, tensor=tensor, op=_OPS[op]) if isinstance(tensor, torch.Tensor) \
            else tensor

    def all_gather(self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False) -> torch.Tensor:
        """Every process's ``tensor``, stacked along a new first dimension (as the ``all_gather`` hook gives it)."""
        alone = tensor.unsqueeze(0) if isinstance(tensor, torch.Tensor) else tensor
        return self._collective("all_gather", alone, tensor=tensor, sync_grads=sync_grads)  # type: ignore[no-any-return]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Process ``src``'s ``obj``, on every process."""
        return self._collective("broadcast", obj, obj=obj, src=src)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process is here."""
        self._collective("barrier", None, name=name)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Every process's decision (``all=True``) or any process's."""
        return bool(self._collective("reduce_boolean_decision", decision, decision=decision, all=all))

    # -- helpers --------------------------------------------------------------------------------------------
    def _collective(self, hook: str, alone: Any, **arguments: Any) -> Any:
        """The Trainer's ``hook`` during a run; ``alone`` (one process's answer) outside one."""
        trainer = trainer_of(self)
        if trainer is None or trainer.state.status != "running":
            return alone
        return trainer.hook.call(hook, trainer=trainer, **arguments)

    def _own_trainer(self, what: str) -> Any:
        trainer = trainer_of(self)
        if trainer is None:
            raise ConfigurationError(f"{type(self).__name__}.{what}: this strategy is no Trainer's; pass it to "
                                     "Trainer(strategy=...) first (or use the one trainer.strategy gives).")
        return trainer

    def _role(self, role: str) -> Any:
        trainer = trainer_of(self)
        return trainer.role_plugins.get(role) if trainer is not None else None

    def _rank(self, name: str, alone: int) -> int:
        trainer = trainer_of(self)
        return int(getattr(trainer, name)) if trainer is not None else alone
