"""``lightning.pytorch.callbacks.lr_finder``: ``LearningRateFinder`` (over ``ember.tuner``)."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.finders import LearningRateFinder

__all__ = ["LearningRateFinder"]
