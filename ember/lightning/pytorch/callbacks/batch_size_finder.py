"""``lightning.pytorch.callbacks.batch_size_finder``: ``BatchSizeFinder`` (over ``ember.tuner``)."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.finders import BatchSizeFinder

__all__ = ["BatchSizeFinder"]
