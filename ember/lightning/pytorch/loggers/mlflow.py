"""``lightning.pytorch.loggers.mlflow``: ember's ``MLFlowLogger`` (``mlflow`` is imported when the logger starts)."""

from __future__ import annotations

from ember.plugins.loggers.mlflow_logger import MLFlowLogger

__all__ = ["MLFlowLogger"]
