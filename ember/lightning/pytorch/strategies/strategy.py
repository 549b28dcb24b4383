"""``lightning.pytorch.strategies.strategy``: ``Strategy``, the base of Lightning's strategy classes, as an ember
plugin (see :mod:`ember.lightning.seed`).

``Trainer(strategy=DDPStrategy(find_unused_parameters=True))`` runs ember's ``strategy.ddp`` with those
arguments; a subclass's override of ``reduce``, ``all_gather``, ``barrier``, ``broadcast``,
``reduce_boolean_decision``, ``process_dataloader``, ``batch_to_device``, ``model_sharded_context``,
``setup_environment`` or ``save_checkpoint`` answers the ember hook of that name, and its ``setup``,
``teardown``, ``on_train_start``, ... are ember events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import torch

from ember.core.hooks.defaults import move_to_device
from ember.hookspecs import hookimpl
from ember.lightning.seed import SeedPlugin, base_hook
from ember.plugins.strategies.distributed import ProcessGroupStrategy
from ember.plugins.strategies.single_device import SingleDeviceStrategy as _EmberSingle
from ember.plugins.strategies.surface import StrategySurface

__all__ = ["Strategy"]

#: The ember hooks a Strategy answers through Lightning's methods.
THROUGH_METHODS = frozenset({"batch_to_device", "process_dataloader", "reduce", "all_gather", "broadcast", "barrier",
                             "reduce_boolean_decision", "model_sharded_context", "setup_environment",
                             "save_checkpoint", "configure"})
#: Lightning's reduce_op names -> ember's.
_OPS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


class Strategy(SeedPlugin, StrategySurface):
    """Lightning's ``Strategy``: one process; subclass it to change one part of the work. ``accelerator``,
    ``checkpoint_io`` and ``precision_plugin`` are passed to the Trainer on their own (``Trainer(accelerator=...,
    plugins=[...])``) in ember, where each role is a plugin of its own; ``root_device``, ``lightning_module``,
    ``model``, ``optimizers``, ``backward``, ``tensor_init_context``, ... answer as on ember's own strategies
    (:class:`ember.plugins.strategies.surface.StrategySurface`)."""


    role = "strategy"

    def __init__(self, accelerator: Any = None, checkpoint_io: Any = None, precision_plugin: Any = None) -> None:
        if accelerator is not None or checkpoint_io is not None or precision_plugin is not None:
            raise TypeError(f"{type(self).__name__}(accelerator=, checkpoint_io=, precision_plugin=): pass them to "
                            "the Trainer instead (accelerator=..., plugins=[...]); in ember each is a plugin of its own.")

    @property
    def async_save(self) -> bool:
        """Whether the checkpoint writes may go to the background (as the inner plugin says)."""
        return bool(getattr(self.plugin, "async_save", False))

    # -- Lightning's methods ---------------------------------------------------------------------------
    def connect(self, model: Any) -> None:
        """Called once per run with the module, before the accelerator sets up the device (as in Lightning), and by
        code that attaches a module by hand: ``model`` becomes the Trainer's (``lightning_module``)."""
        StrategySurface.connect(self, model)

    def connect_trainer(self, trainer: Any) -> None:
        self.connect(trainer.module)

    def setup_environment(self) -> None:
        self.delegate("setup_environment")

    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        device = device or self.root_device
        return self.delegate("batch_to_device", None, batch=batch, device=device, dataloader_idx=dataloader_idx) \
            or move_to_device(batch, device, non_blocking=device.type != "cpu")

    def process_dataloader(self, dataloader: Any) -> Any:
        return self.delegate("process_dataloader", dataloader, dataloader=dataloader,
                             stage=getattr(self, "_stage", "train"))

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        op = _OPS.get(str(reduce_op).lower().rsplit(".", 1)[-1], "mean")
        return self.delegate("reduce", tensor, tensor=tensor, op=op)

    def all_gather(self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False) -> torch.Tensor:
        return self.delegate("all_gather", None, tensor=tensor, sync_grads=sync_grads)  # type: ignore[no-any-return]

    def barrier(self, name: str | None = None) -> None:
        self.delegate("barrier", name=name)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self.delegate("broadcast", obj, obj=obj, src=src)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return bool(self.delegate("reduce_boolean_decision", decision, decision=decision, all=all))

    def model_sharded_context(self) -> contextlib.AbstractContextManager:
        return self.delegate("model_sharded_context", None) or contextlib.nullcontext()  # type: ignore[no-any-return]

    def save_checkpoint(self, checkpoint: dict, filepath: str, storage_options: Any = None) -> Any:
        """None: the checkpoint storage writes the file (on global rank 0); an override that writes it itself
        returns True."""
        return self.delegate("save_checkpoint", None, checkpoint=checkpoint, path=filepath)

    @base_hook
    def setup(self, trainer: Any) -> None:
        """Called at each run's ``setup`` when a subclass overrides it."""

    @base_hook
    def teardown(self) -> None:
        """Called at the end of each run when a subclass overrides it."""

    @base_hook
    def on_exception(self, exception: BaseException) -> None:
        """Called with the exception that ends a run (ember's ``on_exception`` event), when a subclass overrides
        it."""

    # -- the adapter -----------------------------------------------------------------------------------
    @hookimpl(specname="setup_environment")
    def _ember_setup_environment(self) -> None:
        self.setup_environment()

    @hookimpl(specname="batch_to_device")
    def _ember_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return self.batch_to_device(batch, device, dataloader_idx)

    @hookimpl(specname="process_dataloader")
    def _ember_process_dataloader(self, dataloader: Any, stage: str) -> Any:
        self._stage = stage
        return self.process_dataloader(dataloader)

    @hookimpl(specname="reduce")
    def _ember_reduce(self, tensor: torch.Tensor, op: str) -> Any:
        return self.reduce(tensor, reduce_op=op)

    @hookimpl(specname="all_gather")
    def _ember_all_gather(self, tensor: torch.Tensor, sync_grads: bool) -> Any:
        return self.all_gather(tensor, sync_grads=sync_grads)

    @hookimpl(specname="broadcast", wrapper=True)  # a wrapper, so that None sent by ``src`` is an answer too
    def _ember_broadcast(self, obj: Any, src: int) -> Generator[None, Any, Any]:
        yield
        return self.broadcast(obj, src)

    @hookimpl(specname="barrier")
    def _ember_barrier(self, name: str | None) -> bool:
        self.barrier(name)
        return True

    @hookimpl(specname="reduce_boolean_decision")
    def _ember_reduce_boolean_decision(self, decision: bool, all: bool) -> bool:
        return self.reduce_boolean_decision(decision, all)

    @hookimpl(specname="model_sharded_context")
    def _ember_model_sharded_context(self) -> contextlib.AbstractContextManager:
        return self.model_sharded_context()

    @hookimpl(specname="save_checkpoint", tryfirst=True)
    def _ember_save_checkpoint(self, checkpoint: dict, path: str) -> Any:
        return self.save_checkpoint(checkpoint, path)


Strategy.stands_for = (_EmberSingle, ProcessGroupStrategy)
