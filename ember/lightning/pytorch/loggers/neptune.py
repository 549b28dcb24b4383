"""``lightning.pytorch.loggers.neptune``: ``NeptuneLogger`` imports; using it says what to use instead."""

from __future__ import annotations

from ember.lightning.loggers import NeptuneLogger

__all__ = ["NeptuneLogger"]
