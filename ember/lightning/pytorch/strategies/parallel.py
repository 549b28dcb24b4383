"""``lightning.pytorch.strategies.parallel``: ``ParallelStrategy``, the base of the strategies of several processes."""

from __future__ import annotations

from ember.lightning.pytorch.strategies.strategy import Strategy
from ember.plugins.strategies.distributed import ProcessGroupStrategy

__all__ = ["ParallelStrategy"]


class ParallelStrategy(Strategy):
    """Lightning's base of the strategies that run several processes (:class:`DDPStrategy`, :class:`FSDPStrategy`);
    subclass one of those."""


ParallelStrategy.stands_for = (ProcessGroupStrategy,)
