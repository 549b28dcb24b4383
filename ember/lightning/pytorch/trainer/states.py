"""``lightning.pytorch.trainer.states``: the values of ``trainer.state``.

ember's ``trainer.state.fn``, ``.stage`` and ``.status`` are strings; these enums compare equal to them
(``trainer.state.fn == TrainerFn.FITTING``), so Lightning code that tests them works unchanged.
"""

from __future__ import annotations

from ember.core.loop.state import TrainerState
from ember.lightning.pytorch.utilities import LightningEnum


class TrainerStatus(LightningEnum):
    """``trainer.state.status``."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (self.FINISHED, self.INTERRUPTED)


class TrainerFn(LightningEnum):
    """``trainer.state.fn``: which entry point runs."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(LightningEnum):
    """``trainer.state.stage``: what the loop is doing."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (self.VALIDATING, self.TESTING, self.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        if self in (self.VALIDATING, self.SANITY_CHECKING):
            return "val"
        return self.value


__all__ = ["LightningEnum", "RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]
