"""``lightning.pytorch``'s names: ``import ember.lightning.pytorch as pl`` (see :mod:`ember.lightning`)."""

from __future__ import annotations

from typing import Any

from ember.lightning import Callback, LightningDataModule, LightningModule, Trainer, seed_everything

#: The Lightning release whose names and behaviour this mirrors (code that compares ``pl.__version__`` sees it).
__version__ = "2.6.6"

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "callbacks", "loggers",
           "seed_everything"]


#: Sub-packages reachable as attributes (``pl.utilities.rank_zero_only``), imported on first use.
_SUBMODULES = ("callbacks", "core", "demos", "loggers", "profilers", "trainer", "tuner", "utilities", "strategies",
               "accelerators", "plugins", "cli")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
