"""``lightning.pytorch.trainer``: the Trainer (ember's) and ``trainer.states``."""

from __future__ import annotations

from ember.core.api.trainer import Trainer

__all__ = ["Trainer"]
