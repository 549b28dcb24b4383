"""``lightning.pytorch``'s names: ``import ember.lightning.pytorch as pl`` (see :mod:`ember.lightning`)."""

from __future__ import annotations

from typing import Any

from ember.lightning import Callback, LightningDataModule, LightningModule, Trainer, seed_everything

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "callbacks", "loggers",
           "seed_everything"]


def __getattr__(name: str) -> Any:
    if name in ("callbacks", "loggers"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
