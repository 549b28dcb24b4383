"""``lightning.pytorch.core.datamodule``: ``LightningDataModule`` (:class:`ember.DataModule`)."""

from __future__ import annotations

from ember.core.api.datamodule import DataModule as LightningDataModule

__all__ = ["LightningDataModule"]
