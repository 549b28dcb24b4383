"""``lightning.pytorch.callbacks.stochastic_weight_avg``: ``StochasticWeightAveraging`` is ember's ``SWA``."""

from __future__ import annotations

from ember.plugins.callbacks.swa import SWA as StochasticWeightAveraging

__all__ = ["StochasticWeightAveraging"]
