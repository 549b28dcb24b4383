"""``lightning.pytorch.callbacks.progress``: ember's progress bars by Lightning's names."""

from __future__ import annotations

from ember.plugins.progress import ProgressBar
from ember.plugins.progress.rich_bar import RichProgressBar
from ember.plugins.progress.tqdm_bar import TQDMProgressBar

__all__ = ["ProgressBar", "RichProgressBar", "TQDMProgressBar"]
