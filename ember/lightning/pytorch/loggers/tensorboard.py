"""``lightning.pytorch.loggers.tensorboard``: ember's ``TensorBoardLogger``."""

from __future__ import annotations

from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger

__all__ = ["TensorBoardLogger"]
