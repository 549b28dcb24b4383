"""``lightning.pytorch.callbacks.early_stopping``: ember's ``EarlyStopping`` (its ``stopping_reason`` is a
string rather than Lightning's ``EarlyStoppingReason`` enum)."""

from __future__ import annotations

from ember.plugins.callbacks.early_stopping import EarlyStopping

__all__ = ["EarlyStopping"]
