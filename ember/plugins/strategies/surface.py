"""What code holding a strategy object reads from it: ``trainer.strategy.root_device``, ``.lightning_module``,
``.connect(model)``, ``.backward(loss, optimizer)``, ... with Lightning's names and meaning.

Each answer is read from the Trainer that selected the strategy (:func:`ember.core.api.trainer_properties.
trainer_of`) when it is asked for, so nothing is kept up to date during a run. A strategy plugin that is no
Trainer's (made by hand, never passed to one) answers as a fresh Lightning strategy does: the CPU, no module.

The names are Lightning's, and two of them are also names of ember's role hooks: ``root_device`` and ``backward``.
Here they are the Lightning attributes; a strategy plugin built on this class that answers one of those hooks
names its method otherwise and marks it ``@ember.hookimpl(specname="root_device")``. The strategy role hooks that
ember's strategies answer under their own names (``reduce``, ``barrier``, ``broadcast``, ``all_gather``,
``process_dataloader``, ``setup_environment``, ``teardown``, ...) take ember's arguments (the trainer first) and are
not part of this surface.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ember.core.api.role_plugins import trainer_of
from ember.core.errors import ConfigurationError


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

    # -- helpers --------------------------------------------------------------------------------------------
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
