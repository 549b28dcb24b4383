"""``lightning.pytorch.tuner.tuning``: ``Tuner``."""

from __future__ import annotations

from ember.lightning.pytorch.tuner import Tuner

__all__ = ["Tuner"]
