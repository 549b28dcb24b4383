"""``lightning.fabric.utilities.seed``: ember's ``seed_everything`` and ``isolate_rng``."""

from __future__ import annotations

from ember.core.loop.seed import seed_everything
from ember.lightning.pytorch.utilities.seed import isolate_rng

__all__ = ["isolate_rng", "seed_everything"]
