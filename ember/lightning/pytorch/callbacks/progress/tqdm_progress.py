"""``lightning.pytorch.callbacks.progress.tqdm_progress``: ember's ``TQDMProgressBar``."""

from __future__ import annotations

import math

from ember.plugins.progress.tqdm_bar import TQDMProgressBar

__all__ = ["TQDMProgressBar", "convert_inf"]


def convert_inf(x: int | float | None) -> int | float | None:
    """None for an infinite total (tqdm's spelling of "unknown"), else ``x``."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x
