"""``lightning.pytorch.callbacks.timer``: ember's ``Timer`` and the ``Interval`` it checks at."""

from __future__ import annotations

from ember.lightning.pytorch.utilities import LightningEnum
from ember.plugins.callbacks.timer import Timer

__all__ = ["Interval", "Timer"]


class Interval(LightningEnum):
    """When ``Timer`` checks the time: after every training batch or at the end of each epoch."""

    step = "step"
    epoch = "epoch"
