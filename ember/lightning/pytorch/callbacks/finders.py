"""``LearningRateFinder`` and ``BatchSizeFinder``: :mod:`ember.tuner` run as callbacks, before a fit trains.

Each runs its search when the fit sets up (``setup``, stage ``"fit"``, before the loaders are built), on trial
Trainers of its own, and leaves the model as it was but for the value found (``lr``/``learning_rate`` or
``batch_size``), so the fit then trains with it.
"""

from __future__ import annotations

from typing import Any

from ember.core.api.callback import Callback


class LearningRateFinder(Callback):
    """Run the learning-rate range test before training (:meth:`ember.tuner.Tuner.lr_find`, same arguments);
    ``optimal_lr`` is the :class:`~ember.tuner.LRFinder` result. Subclass and call :meth:`lr_find` from another
    hook (``on_train_epoch_start``) to search again later."""

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(self, min_lr: float = 1e-8, max_lr: float = 1.0, num_training_steps: int = 100,
                 mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                 attr_name: str = "") -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"LearningRateFinder(mode={mode!r}): expected one of {self.SUPPORTED_MODES}.")
        self._min_lr, self._max_lr, self._num_training_steps = min_lr, max_lr, num_training_steps
        self._mode, self._early_stop_threshold = mode, early_stop_threshold
        self._update_attr, self._attr_name = update_attr, attr_name
        self.optimal_lr: Any = None

    def lr_find(self, trainer: Any, pl_module: Any) -> None:
        from ember.tuner import lr_find

        self.optimal_lr = lr_find(trainer, pl_module, None, trainer.datamodule, self._min_lr, self._max_lr,
                                  self._num_training_steps, self._mode, self._early_stop_threshold,
                                  self._update_attr, self._attr_name)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.lr_find(trainer, pl_module)


class BatchSizeFinder(Callback):
    """Find the largest batch size that trains before training (:meth:`ember.tuner.Tuner.scale_batch_size`, same
    arguments); ``optimal_batch_size`` is the size found, written to ``batch_arg_name`` on the DataModule or
    the model."""

    SUPPORTED_MODES = ("power", "binsearch")

    def __init__(self, mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                 batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int = 8192) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"BatchSizeFinder(mode={mode!r}): expected one of {self.SUPPORTED_MODES}.")
        self._mode, self._steps_per_trial, self._init_val = mode, steps_per_trial, init_val
        self._max_trials, self._batch_arg_name = max_trials, batch_arg_name
        self._margin, self._max_val = margin, max_val
        self.optimal_batch_size: int | None = init_val

    def scale_batch_size(self, trainer: Any, pl_module: Any) -> None:
        from ember.tuner import scale_batch_size

        self.optimal_batch_size = scale_batch_size(trainer, pl_module, None, trainer.datamodule, self._mode,
                                                   self._steps_per_trial, self._init_val, self._max_trials,
                                                   self._batch_arg_name, self._margin, self._max_val)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.scale_batch_size(trainer, pl_module)


__all__ = ["BatchSizeFinder", "LearningRateFinder"]
