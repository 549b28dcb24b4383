"""``lightning.pytorch.callbacks.progress.progress_bar``: ``ProgressBar``, the base of a custom bar, and
``get_standard_metrics`` (the ``v_num`` a bar shows)."""

from __future__ import annotations

from typing import Any

from ember.plugins.progress import ProgressBar, standard_metrics

__all__ = ["ProgressBar", "get_standard_metrics"]


def get_standard_metrics(trainer: Any) -> dict[str, int | str]:
    """``{"v_num": version}`` of the trainer's loggers (the last 4 characters of a string version; several loggers'
    distinct versions joined by ``_``), or ``{}`` without a logger or a version."""
    return standard_metrics(trainer)
