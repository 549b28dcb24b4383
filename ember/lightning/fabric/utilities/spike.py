"""``lightning.fabric.utilities.spike``: ``TrainingSpikeException``, what ``SpikeDetection`` raises."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.monitors import TrainingSpikeException

__all__ = ["TrainingSpikeException"]
