"""``lightning.pytorch.trainer``: the Trainer (ember's) and ``trainer.states``."""

from __future__ import annotations

from ember.core.api.trainer import Trainer
from ember.core.loop.seed import seed_everything

__all__ = ["Trainer", "seed_everything"]
