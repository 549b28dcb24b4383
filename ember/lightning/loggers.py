"""Lightning's logger names for ember's loggers (``from ember.lightning.loggers import CSVLogger``), each
imported when first used."""

from __future__ import annotations

from ember.lightning._names import lazy_names

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


__getattr__ = lazy_names(__name__, ALIASES, MISSING)
