"""``lightning.pytorch.tuner.lr_finder``: ``_LRFinder``'s public face, ember's :class:`~ember.tuner.LRFinder`."""

from __future__ import annotations

from ember.tuner import LRFinder

__all__ = ["LRFinder"]
