"""``BasePredictionWriter``: write predictions as prediction runs, in a format of your own."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.api.callback import Callback
from ember.core.errors import ConfigurationError
from ember.lightning.pytorch.utilities import LightningEnum

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class WriteInterval(LightningEnum):
    """When a :class:`BasePredictionWriter` writes: after each batch, at the end of the run, or both."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"


def _batch_indices(loader: Any) -> list[list[int]] | None:
    """The dataset indices of each batch of ``loader``, when its order is fixed (a ``DataLoader`` over a map-style
    dataset with a sequential sampler); None otherwise."""
    if not isinstance(loader, torch.utils.data.DataLoader) or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return None
    batch_sampler = loader.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    if batch_sampler is None or not isinstance(sampler, torch.utils.data.SequentialSampler):
        return None
    return [list(indices) for indices in batch_sampler]


class BasePredictionWriter(Callback):
    """Subclass and define :meth:`write_on_batch_end` (``write_interval="batch"``), :meth:`write_on_epoch_end`
    (``"epoch"``) or both (``"batch_and_epoch"``); pass an instance in ``callbacks`` and call
    ``trainer.predict(..., return_predictions=False)`` to keep no predictions in memory.

    ``batch_indices`` are the dataset indices of the batch's items (None when the loader's order is not fixed:
    an iterable dataset or a shuffling sampler)."""

    def __init__(self, write_interval: str | WriteInterval = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ConfigurationError(f"BasePredictionWriter(write_interval={write_interval!r}): expected one of "
                                     f"{', '.join(_INTERVALS)}.")
        self.interval = write_interval
        self._indices: list[list[list[int]] | None] = []
        self._predictions: list[list[Any]] = []
        self._epoch_indices: list[list[Any]] = []

    def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                           batch_idx: int, dataloader_idx: int) -> None:
        """Write one batch's ``prediction`` (override for ``write_interval`` ``"batch"``)."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval!r}) must define "
                                  "write_on_batch_end")

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        """Write every prediction of the run: a list per loader when there are several, else one list (override for
        ``write_interval`` ``"epoch"``)."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval!r}) must define "
                                  "write_on_epoch_end")

    def on_predict_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        loaders = trainer.predict_dataloaders
        loaders = loaders if isinstance(loaders, list) else [loaders]
        self._indices = [_batch_indices(loader) for loader in loaders]
        self._predictions = [[] for _ in loaders]
        self._epoch_indices = [[] for _ in loaders]

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        known = self._indices[dataloader_idx] if dataloader_idx < len(self._indices) else None
        indices = known[batch_idx] if known is not None and batch_idx < len(known) else None
        if self.interval in ("batch", "batch_and_epoch"):
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)
        if self.interval in ("epoch", "batch_and_epoch"):
            self._predictions[dataloader_idx].append(outputs)
            self._epoch_indices[dataloader_idx].append(indices)

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.interval not in ("epoch", "batch_and_epoch"):
            return
        one = len(self._predictions) == 1
        self.write_on_epoch_end(trainer, pl_module, self._predictions[0] if one else self._predictions,
                                self._epoch_indices[0] if one else self._epoch_indices)
        self._predictions, self._epoch_indices = [], []


__all__ = ["BasePredictionWriter"]
