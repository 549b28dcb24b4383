"""``lightning.pytorch.callbacks.lr_monitor``: ember's ``LearningRateMonitor``."""

from __future__ import annotations

from ember.plugins.callbacks.lr_monitor import LearningRateMonitor

__all__ = ["LearningRateMonitor"]
