"""``lightning.pytorch.plugins``'s names: precision, checkpoint storage and cluster environments as ember plugins."""

from __future__ import annotations

from ember.lightning.pytorch.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"]
