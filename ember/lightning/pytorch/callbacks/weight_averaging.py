"""``lightning.pytorch.callbacks.weight_averaging``: the names import; using them says what to use instead."""

from __future__ import annotations

from ember.lightning.callbacks import EMAWeightAveraging, WeightAveraging

__all__ = ["EMAWeightAveraging", "WeightAveraging"]
