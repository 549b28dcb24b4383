"""``strategy.single_device``: one process, one device.

Everything a single process needs is the plain-PyTorch fallback (``core.defaults``), so this plugin only
checks that one device was asked for.
"""

from __future__ import annotations

from typing import Any

from ember.core.errors import ConfigurationError
from ember.plugins.strategies.distributed import requested_processes
from ember.plugins.strategies.surface import StrategySurface


def _count(config: Any) -> int:
    """The devices ``Trainer(devices=...)`` asks for (``-1``: every device of the accelerator; ``"auto"``: one)."""
    devices = config.devices
    if devices in ("auto", None):
        return 1
    if devices in (-1, "-1"):
        return requested_processes(config)
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str):
        return len([d for d in devices.split(",") if d.strip()]) if "," in devices else int(devices)
    return int(devices)


class SingleDeviceStrategy(StrategySurface):
    role = "strategy"
    identity = "strategy.single_device"
    #: What starts the processes of a run: nothing here, the run stays in the calling process (Lightning's
    #: ``strategy.launcher`` is None for one device too).
    launcher = None

    @staticmethod
    def auto_select(config: Any) -> int:
        return 0

    @staticmethod
    def check_available(config: Any) -> None:
        n = _count(config)
        if n != 1 or config.num_nodes != 1:
            raise ConfigurationError(
                f"Trainer(devices={config.devices!r}, num_nodes={config.num_nodes}) asks for {n * config.num_nodes} "
                "devices, but strategy 'single_device' runs one; use strategy='ddp' (or 'auto') for several.")
