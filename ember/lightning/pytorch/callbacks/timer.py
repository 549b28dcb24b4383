"""``lightning.pytorch.callbacks.timer``: ember's ``Timer`` and the ``Interval`` it checks at.

This module's ``time`` is the Timer's clock: setting it (``mock.patch("lightning.pytorch.callbacks.timer.time")``,
as Lightning's module allows) sets the ``time`` of ember's timer module too.
"""

from __future__ import annotations

import sys
import time  # noqa: F401  (the clock that setting this name replaces)
import types
from typing import Any

from ember.lightning.pytorch.utilities import LightningEnum
from ember.plugins.callbacks import timer as _timer_module
from ember.plugins.callbacks.timer import Timer

__all__ = ["Interval", "Timer"]


class Interval(LightningEnum):
    """When ``Timer`` checks the time: after every training batch or at the end of each epoch."""

    step = "step"
    epoch = "epoch"


class _SharedClock(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name == "time":
            _timer_module.time = value
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _SharedClock
