"""Lightning's logger names for ember's loggers (``from ember.lightning.loggers import CSVLogger``), each
imported when first used."""

from __future__ import annotations

from ember.lightning._names import lazy_names

ALIASES = {
    # Lightning's default folder name, lightning_logs (ember's classes use ember_logs)
    "CSVLogger": ("ember.lightning.pytorch.loggers.csv_logs", "CSVLogger"),
    "TensorBoardLogger": ("ember.lightning.pytorch.loggers.tensorboard", "TensorBoardLogger"),
    "MLFlowLogger": ("ember.plugins.loggers.mlflow_logger", "MLFlowLogger"),
    "WandbLogger": ("ember.plugins.loggers.wandb_logger", "WandbLogger"),
    "Logger": ("ember.lightning.pytorch.loggers.logger", "Logger"),
}
MISSING = {"CometLogger": "subclass ember.lightning.pytorch.loggers.Logger and call comet_ml in it",
           "NeptuneLogger": "subclass ember.lightning.pytorch.loggers.Logger and call neptune in it",
           "LitLogger": "subclass ember.lightning.pytorch.loggers.Logger and call litlogger in it"}

__all__ = [*ALIASES, *MISSING]


__getattr__ = lazy_names(__name__, ALIASES, MISSING)
