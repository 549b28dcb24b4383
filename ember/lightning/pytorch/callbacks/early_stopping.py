"""``lightning.pytorch.callbacks.early_stopping``: ember's ``EarlyStopping`` and ``EarlyStoppingReason``, and
``log``, the logger its messages go to."""

from __future__ import annotations

from ember.plugins.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason, log

__all__ = ["EarlyStopping", "EarlyStoppingReason", "log"]
