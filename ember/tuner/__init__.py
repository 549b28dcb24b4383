"""Tuning before training: the learning-rate finder and the batch-size finder (Lightning's ``Tuner`` API).

Both run short trial fits on a Trainer built from the given one (same accelerator, precision, strategy; no
logging, checkpoints or validation) and put the model back exactly as it was: parameters and buffers bit for bit,
its attributes, and every random generator, so a fit afterwards draws what it would have drawn without tuning.
Then they set what they found on the model (``lr``/``learning_rate``, ``batch_size``) unless told not to.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.tuner.batch_size import scale_batch_size
from ember.tuner.lr_finder import LRFinder, lr_find

__all__ = ["LRFinder", "Tuner", "lr_find", "scale_batch_size"]


class Tuner:
    """``Tuner(trainer).lr_find(model, ...)`` and ``Tuner(trainer).scale_batch_size(model, ...)``."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def lr_find(self, model: torch.nn.Module, train_dataloaders: Any = None, datamodule: Any = None,
                min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True, attr_name: str = "") -> LRFinder:
        """The learning-rate range test: ``num_training`` optimizer steps with the learning rate rising from
        ``min_lr`` to ``max_lr`` (``"exponential"`` or ``"linear"``), recording the smoothed loss; stops early
        once the loss exceeds ``early_stop_threshold`` times its best (None: never). Returns an
        :class:`LRFinder` (``results``, ``suggestion()``, ``plot(path)``); with ``update_attr``, the suggestion
        is written to the model's ``lr`` or ``learning_rate`` (or ``attr_name``) attribute or hparams entry."""
        return lr_find(self.trainer, model, train_dataloaders, datamodule, min_lr, max_lr, num_training, mode,
                       early_stop_threshold, update_attr, attr_name)

    def scale_batch_size(self, model: torch.nn.Module, train_dataloaders: Any = None, datamodule: Any = None,
                         mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                         batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int = 8192,
                         max_memory: int | None = None) -> int:
        """The largest batch size that trains ``steps_per_trial`` steps without running out of memory (or, with
        ``max_memory`` bytes, without going over that CUDA peak): ``"power"`` doubles from ``init_val`` until a
        failure; ``"binsearch"`` then bisects between the last success and the failure and returns the size found
        less ``margin`` (5%) as a safety buffer. Sizes stop at ``max_val``. The batch size is read
        from and written to ``batch_arg_name`` on the DataModule or the model (attribute or hparams entry),
        whose ``train_dataloader()`` must build the loader from it. Returns the size found."""
        return scale_batch_size(self.trainer, model, train_dataloaders, datamodule, mode, steps_per_trial, init_val,
                                max_trials, batch_arg_name, margin, max_val, max_memory)
