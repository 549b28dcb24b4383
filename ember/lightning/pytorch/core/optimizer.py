"""``lightning.pytorch.core.optimizer``: ``LightningOptimizer`` is the class of what ``self.optimizers()``
returns (:class:`ember.core.loop.optim.ManualOptimizer`: ``step()`` runs the precision's and strategy's step
and ``on_before_optimizer_step``)."""

from __future__ import annotations

from ember.core.loop.training import ManualOptimizer as LightningOptimizer

__all__ = ["LightningOptimizer", "do_nothing_closure"]


def do_nothing_closure() -> None:
    """A closure for ``optimizer.step(closure)`` that computes nothing."""
