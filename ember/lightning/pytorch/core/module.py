"""``lightning.pytorch.core.module``: ``LightningModule`` (:class:`ember.Module`)."""

from __future__ import annotations

from ember.core.api.module import Module as LightningModule

__all__ = ["LightningModule"]
