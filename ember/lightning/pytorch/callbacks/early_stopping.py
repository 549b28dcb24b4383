"""``lightning.pytorch.callbacks.early_stopping``: ember's ``EarlyStopping`` and ``EarlyStoppingReason``."""

from __future__ import annotations

from ember.plugins.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason

__all__ = ["EarlyStopping", "EarlyStoppingReason"]
