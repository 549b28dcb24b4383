"""``lightning.pytorch.strategies.single_device``: ``SingleDeviceStrategy`` (ember's ``strategy.single_device``)."""

from __future__ import annotations

from typing import Any

from ember.lightning.pytorch.strategies.strategy import THROUGH_METHODS, Strategy
from ember.lightning.seed import add_forwarders
from ember.plugins.strategies.single_device import SingleDeviceStrategy as _EmberSingle

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """ember's ``strategy.single_device``. ``device`` is taken from the accelerator in ember (``Trainer(accelerator=,
    devices=)``); only the default is accepted here."""


    plugin_class = _EmberSingle

    def __init__(self, device: Any = "cpu", accelerator: Any = None, checkpoint_io: Any = None,
                 precision_plugin: Any = None) -> None:
        super().__init__(accelerator, checkpoint_io, precision_plugin)
        self.device = device


add_forwarders(SingleDeviceStrategy, _EmberSingle, skip=THROUGH_METHODS)
SingleDeviceStrategy.stands_for = (_EmberSingle,)
