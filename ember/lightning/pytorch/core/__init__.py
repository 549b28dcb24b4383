"""``lightning.pytorch.core``: ``LightningModule`` is :class:`ember.Module`, ``LightningDataModule`` is
:class:`ember.DataModule`."""

from __future__ import annotations

from ember.core.api.datamodule import DataModule as LightningDataModule
from ember.core.api.module import Module as LightningModule

__all__ = ["LightningDataModule", "LightningModule"]
