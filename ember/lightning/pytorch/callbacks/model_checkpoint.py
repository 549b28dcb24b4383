"""``lightning.pytorch.callbacks.model_checkpoint``: ember's ``ModelCheckpoint``."""

from __future__ import annotations

from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint

__all__ = ["ModelCheckpoint"]
