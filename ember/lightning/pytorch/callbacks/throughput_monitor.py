"""``lightning.pytorch.callbacks.throughput_monitor``: ``ThroughputMonitor``."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.monitors import ThroughputMonitor

__all__ = ["ThroughputMonitor"]
