"""``lightning.pytorch.loggers.wandb``: ember's ``WandbLogger`` (``wandb`` is imported when the logger starts)."""

from __future__ import annotations

from ember.plugins.loggers.wandb_logger import WandbLogger

__all__ = ["WandbLogger"]
