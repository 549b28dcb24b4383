"""``lightning.pytorch.trainer.trainer``: ``Trainer`` is ember's Trainer."""

from __future__ import annotations

from ember.core.api.trainer import Trainer

__all__ = ["Trainer"]
