"""``lightning.pytorch.callbacks.device_stats_monitor``: ``DeviceStatsMonitor``."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.monitors import DeviceStatsMonitor

__all__ = ["DeviceStatsMonitor"]
