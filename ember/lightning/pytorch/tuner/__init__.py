"""``lightning.pytorch.tuner``: ``Tuner`` with Lightning's arguments, on :mod:`ember.tuner`."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.tuner import LRFinder
from ember.tuner import Tuner as _EmberTuner


def _fit_only(method: str, val_dataloaders: Any, dataloaders: Any) -> None:
    if method != "fit" or dataloaders is not None:
        raise ConfigurationError(f"Tuner(method={method!r}, dataloaders=...): ember tunes on training only "
                                 "(method='fit' with train_dataloaders or a datamodule).")
    # val_dataloaders are accepted and unused: the trials run no validation


def _skipped(trainer: Any, finder: str) -> bool:
    """Under ``fast_dev_run`` (a quick check that the code runs) no search is made, as in Lightning: say so."""
    if not trainer.fast_dev_run:
        return False
    warnings.warn(f"Skipping {finder} since `fast_dev_run` is enabled: Trainer(fast_dev_run=...) only checks that "
                  "the code runs, so nothing is searched and the model is left as it is; tune with a Trainer without "
                  "fast_dev_run.", UserWarning, stacklevel=3)
    return True


class Tuner(_EmberTuner):
    """``Tuner(trainer).lr_find(model, ...)`` and ``Tuner(trainer).scale_batch_size(model, ...)`` with Lightning's
    parameters, in Lightning's order (``val_dataloaders`` is accepted: the trials run no validation; ``method``
    must be ``"fit"``)."""

    def lr_find(self, model: torch.nn.Module, train_dataloaders: Any = None,  # type: ignore[override]
                val_dataloaders: Any = None, dataloaders: Any = None, datamodule: Any = None, method: str = "fit",
                min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                attr_name: str = "") -> LRFinder | None:
        _fit_only(method, val_dataloaders, dataloaders)
        if _skipped(self.trainer, "learning rate finder"):
            return None
        return super().lr_find(model, train_dataloaders, datamodule, min_lr=min_lr, max_lr=max_lr,
                               num_training=num_training, mode=mode, early_stop_threshold=early_stop_threshold,
                               update_attr=update_attr, attr_name=attr_name)

    def scale_batch_size(self, model: torch.nn.Module, train_dataloaders: Any = None,  # type: ignore[override]
                         val_dataloaders: Any = None, dataloaders: Any = None, datamodule: Any = None,
                         method: str = "fit", mode: str = "power", steps_per_trial: int = 3, init_val: int = 2,
                         max_trials: int = 25, batch_arg_name: str = "batch_size", margin: float = 0.05,
                         max_val: int = 8192) -> int | None:
        _fit_only(method, val_dataloaders, dataloaders)
        if _skipped(self.trainer, "batch size scaler"):
            return None
        return super().scale_batch_size(model, train_dataloaders, datamodule, mode=mode,
                                        steps_per_trial=steps_per_trial, init_val=init_val, max_trials=max_trials,
                                        batch_arg_name=batch_arg_name, margin=margin, max_val=max_val)


__all__ = ["Tuner"]
