"""``lightning.pytorch.callbacks.progress.rich_progress``: ember's ``RichProgressBar``."""

from __future__ import annotations

from ember.plugins.progress.rich_bar import RichProgressBar

__all__ = ["RichProgressBar"]
