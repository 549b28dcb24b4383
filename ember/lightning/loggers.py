"""Lightning's logger names for ember's loggers (``from ember.lightning.loggers import CSVLogger``), each
imported when first used."""

from __future__ import annotations

import importlib
from typing import Any

ALIASES = {
    "CSVLogger": ("ember.plugins.loggers.csv_logger", "CSVLogger"),
    "TensorBoardLogger": ("ember.plugins.loggers.tensorboard_logger", "TensorBoardLogger"),
    "MLFlowLogger": ("ember.plugins.loggers.mlflow_logger", "MLFlowLogger"),
    "WandbLogger": ("ember.plugins.loggers.wandb_logger", "WandbLogger"),
}
MISSING = {"CometLogger": "write a logger plugin (docs/writing-plugins.md)",
           "NeptuneLogger": "write a logger plugin (docs/writing-plugins.md)",
           "Logger": "a logger is any plugin with log_metrics/log_hyperparams hooks (docs/writing-plugins.md)"}

__all__ = list(ALIASES)


def __getattr__(name: str) -> Any:
    found = ALIASES.get(name)
    if found is not None:
        return getattr(importlib.import_module(found[0]), found[1])
    if name in MISSING:
        raise AttributeError(f"ember has no {name}: {MISSING[name]}.")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
