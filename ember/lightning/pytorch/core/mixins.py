"""``lightning.pytorch.core.mixins``: ``HyperparametersMixin`` (``save_hyperparameters``/``hparams``), the base
ember's Module and DataModule share."""

from __future__ import annotations

from ember.core.api.module import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
