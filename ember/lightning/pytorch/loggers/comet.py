"""``lightning.pytorch.loggers.comet``: ``CometLogger`` imports; using it says what to use instead."""

from __future__ import annotations

from ember.lightning.loggers import CometLogger

__all__ = ["CometLogger"]
