"""``lightning.pytorch.callbacks.spike``: ``SpikeDetection``."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.monitors import SpikeDetection

__all__ = ["SpikeDetection"]
