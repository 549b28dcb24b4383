"""``lightning.fabric.utilities``: the helpers of ``lightning.pytorch.utilities`` that Fabric also exports."""

from __future__ import annotations

from ember.core.loop.seed import seed_everything
from ember.lightning.pytorch.utilities import AttributeDict, move_data_to_device
from ember.lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["AttributeDict", "move_data_to_device", "rank_zero_info", "rank_zero_only", "rank_zero_warn",
           "seed_everything"]
