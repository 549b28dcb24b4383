"""``strategy.ddp``: ``DistributedDataParallel``, one process per device (gloo on CPU, NCCL on CUDA).

Every rank holds the whole model; each trains on its share of every batch and the gradients are averaged in
backward. ``Trainer(strategy="auto")`` picks it when ``devices``/``num_nodes`` ask for more than one process or
when a launcher (torchrun, SLURM) started this process. From a plain ``python train.py`` it starts the
processes itself (see :mod:`ember.launcher`).

The training step runs through the DDP wrapper, so its gradient hooks are armed; under gradient accumulation
the micro-batches before the last of a window run under ``no_sync()``, so gradients are averaged once per
optimizer step. Validation, test and predict steps run on the module directly (no gradients to average).
Checkpoints are written by global rank 0 only.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.hooks.defaults import call_step
from ember.hookspecs import hookimpl
from ember.plugins._shared.launchers import launched
from ember.plugins.strategies.distributed import ProcessGroupStrategy, accumulating, hold, requested_processes


class _TrainingStepForward(torch.nn.Module):
    """What DDP wraps: a module whose ``forward`` is the user's ``training_step``."""

    def __init__(self, module: torch.nn.Module, training_step: Any) -> None:
        super().__init__()
        self.module = module
        self.training_step = training_step

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 2 and not kwargs:  # (batch, batch_idx): passed as the step takes them (or just the batch)
            return call_step(self.module, "train", args[0], args[1], 0)
        return self.training_step(*args, **kwargs)


def _ddp_arguments() -> frozenset[str]:
    from torch.nn.parallel import DistributedDataParallel

    return frozenset(inspect.signature(DistributedDataParallel.__init__).parameters) - {"self", "module", "device_ids",
                                                                                          "output_device"}


class DDPStrategy(ProcessGroupStrategy):
    """``DDPStrategy(**ddp_kwargs)``: keyword arguments of ``DistributedDataParallel`` (``find_unused_parameters``,
    ``static_graph``, ``bucket_cap_mb``, ``gradient_as_bucket_view``, ...) are passed on; the process-group ones
    (``process_group_backend``, ``timeout``, ``distributed_sampler``, ``kill_timeout``) are the base's."""

    identity = "strategy.ddp"

    def __init__(self, *, process_group_backend: str | None = None, timeout: Any = None,
                 distributed_sampler: bool = True, kill_timeout: float | None = None, **ddp_kwargs: Any) -> None:
        base: dict[str, Any] = {"process_group_backend": process_group_backend, "distributed_sampler": distributed_sampler,
                                "kill_timeout": kill_timeout}
        if timeout is not None:
            base["timeout"] = timeout
        super().__init__(**base)
        unknown = sorted(set(ddp_kwargs) - _ddp_arguments()) if ddp_kwargs else []  # every Trainer makes one
        if unknown:
            raise ConfigurationError(f"DDPStrategy({', '.join(unknown)}=...): not an argument of DistributedDataParallel; "
                                     f"allowed: {', '.join(sorted(_ddp_arguments()))}.")
        self.ddp_kwargs = ddp_kwargs
        self._wrapped: Any = None  # the DistributedDataParallel of the run (``strategy.model``)

    @staticmethod
    def auto_select(config: Any) -> int | None:
        """Above ``single_device`` when several processes are asked for (``devices=-1``: every CUDA device; ember's
        ``"auto"`` is one process) or a launcher started this one."""
        try:
            several = config.num_nodes > 1 or (config.devices not in ("auto", None)
                                               and requested_processes(config) > 1)
        except ConfigurationError:
            several = False
        return 10 if several or launched() else None

    @hookimpl
    def setup_module(self, trainer: Any, module: torch.nn.Module) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        device = trainer.root_device
        device_ids = [device.index if device.index is not None else 0] if device.type == "cuda" else None
        self._wrapped = hold(DistributedDataParallel(_TrainingStepForward(module, module.training_step),
                                                  device_ids=device_ids, **self.ddp_kwargs))
        return self._wrapped

    @hookimpl(wrapper=True)
    def step(self, trainer: Any, module: Any, batch_idx: int, stage: str) -> Generator[None, Any, Any]:
        model = self._wrapped
        if stage != "train" or model is None:
            return (yield)
        # The fallback runs the training step through ``model`` (the answer of setup_module): DDP's forward.
        if accumulating(trainer, module, batch_idx):
            with model.no_sync():
                return (yield)
        return (yield)

    #: Its save_checkpoint only answers for the ranks that write nothing: checkpoints may be written in the
    #: background (see ember.core.checkpointing.async_writer).
    async_save = True

    @hookimpl(tryfirst=True)
    def save_checkpoint(self, trainer: Any) -> Any:
        return None if trainer.global_rank == 0 else True  # answered on other ranks: nothing to write

    @hookimpl
    def teardown(self) -> None:
        self._wrapped = None
        super().teardown()
