"""``GradientAccumulationScheduler``: change ``accumulate_grad_batches`` at given epochs."""

from __future__ import annotations

from typing import Any

from ember.core.api.callback import Callback
from ember.core.errors import ConfigurationError


class GradientAccumulationScheduler(Callback):
    """``GradientAccumulationScheduler(scheduling={0: 4, 4: 2, 8: 1})``: accumulate 4 batches per optimizer step
    from epoch 0, 2 from epoch 4, 1 from epoch 8. Epochs before the first key accumulate 1. The Trainer's
    ``accumulate_grad_batches`` must be left at 1, and the module must use automatic optimization."""

    def __init__(self, scheduling: dict[int, int]) -> None:
        super().__init__()
        if not scheduling:
            raise TypeError("GradientAccumulationScheduler(scheduling={}): expected {epoch: batches, ...}.")
        for epoch, factor in scheduling.items():
            if not isinstance(epoch, int) or epoch < 0:
                raise IndexError(f"GradientAccumulationScheduler: epoch {epoch!r} must be an int >= 0.")
            if not isinstance(factor, int) or factor < 1:
                raise TypeError(f"GradientAccumulationScheduler: {factor!r} batches (epoch {epoch}) must be an "
                                "int >= 1.")
        self.scheduling = dict(sorted(scheduling.items()))
        if 0 not in self.scheduling:
            self.scheduling = {0: 1, **self.scheduling}
        self.epochs = sorted(self.scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        factor = 1
        for start in self.epochs:
            if epoch >= start:
                factor = self.scheduling[start]
        return factor

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(pl_module, "automatic_optimization", True):
            raise ConfigurationError("GradientAccumulationScheduler works under automatic optimization only; "
                                     "accumulate in training_step yourself under manual optimization.")
        if trainer.accumulate_grad_batches != 1:
            raise ConfigurationError(
                "Trainer(accumulate_grad_batches=...) and GradientAccumulationScheduler both set the accumulation; "
                "leave accumulate_grad_batches at 1 and put every epoch's value in the scheduler.")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            trainer.accumulate_grad_batches = 1  # the Trainer's own value again, for a later fit

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)


__all__ = ["GradientAccumulationScheduler"]
