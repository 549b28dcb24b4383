"""``lightning.pytorch.profilers.base``: ``PassThroughProfiler``."""

from __future__ import annotations

from ember.lightning.pytorch.profilers.profiler import PassThroughProfiler

__all__ = ["PassThroughProfiler"]
