"""``lightning.fabric.utilities.rank_zero``: the rank-zero helpers of ``lightning.pytorch.utilities.rank_zero``."""

from __future__ import annotations

from ember.lightning.pytorch.utilities.rank_zero import *  # noqa: F403
from ember.lightning.pytorch.utilities.rank_zero import __all__ as __all__
