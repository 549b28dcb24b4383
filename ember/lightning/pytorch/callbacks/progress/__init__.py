"""``lightning.pytorch.callbacks.progress``: the progress bars by Lightning's names (``TQDMProgressBar`` with
Lightning's behaviour, see :mod:`.tqdm_progress`)."""

from __future__ import annotations

from ember.lightning.pytorch.callbacks.progress.tqdm_progress import TQDMProgressBar
from ember.plugins.progress import ProgressBar
from ember.plugins.progress.rich_bar import RichProgressBar

__all__ = ["ProgressBar", "RichProgressBar", "TQDMProgressBar"]
