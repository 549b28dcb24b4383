"""``lightning.pytorch.strategies.fsdp``: ``FSDPStrategy`` (ember's ``strategy.fsdp``, FSDP2)."""

from __future__ import annotations

from ember.lightning.pytorch.strategies.ddp import DDPStrategy
from ember.lightning.pytorch.strategies.strategy import THROUGH_METHODS
from ember.lightning.seed import add_forwarders
from ember.plugins.strategies.fsdp import FSDPStrategy as _EmberFSDP

__all__ = ["FSDPStrategy"]


class FSDPStrategy(DDPStrategy):
    """ember's ``strategy.fsdp`` (FSDP2, ``fully_shard``): its arguments are ember's (``shard_modules``,
    ``reshard_after_forward``, ``mixed_precision``, ``cpu_offload``, ...); Lightning's FSDP1 arguments
    (``auto_wrap_policy``, ``sharding_strategy``, ...) have no meaning there."""


    plugin_class = _EmberFSDP


add_forwarders(FSDPStrategy, _EmberFSDP, skip=THROUGH_METHODS)
FSDPStrategy.stands_for = (_EmberFSDP,)
