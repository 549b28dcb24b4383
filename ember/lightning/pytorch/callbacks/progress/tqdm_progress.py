"""``lightning.pytorch.callbacks.progress.tqdm_progress``: ember's ``TQDMProgressBar``, and ``Tqdm``, a tqdm bar
whose numbers keep their width (``1.000``, ``0.100``) so that a postfix does not flicker as values change."""

from __future__ import annotations

import math

from tqdm.auto import tqdm as _tqdm

from ember.plugins.progress.tqdm_bar import TQDMProgressBar

__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]

_WIDTH = 5  # the characters a padded number takes: "1.000"


class Tqdm(_tqdm):  # type: ignore[misc,valid-type]
    @staticmethod
    def format_num(n: int | float | str) -> str:
        """``n`` as tqdm writes it; a float, or a string of a number, padded with zeros to five characters
        (``1.0`` -> ``1.000``); numbers in exponent notation and other strings as they are."""
        pad = isinstance(n, (float, str))
        text = n if isinstance(n, str) else _tqdm.format_num(n)
        if not pad or "e" in text:
            return text
        try:
            float(text)
        except ValueError:
            return text
        if "." not in text and len(text) < _WIDTH:
            text += "."
        return text + "0" * (_WIDTH - len(text))


def convert_inf(x: int | float | None) -> int | float | None:
    """None for an infinite total (tqdm's spelling of "unknown"), else ``x``."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x
