"""``lightning.pytorch``'s names: ``import ember.lightning.pytorch as pl`` (see :mod:`ember.lightning`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.lightning import Callback, LightningDataModule, LightningModule, seed_everything

if TYPE_CHECKING:
    from ember.core.api.trainer import Trainer  # given by __getattr__: see ember.lightning._names.lightning_trainer

#: The Lightning release whose names and behaviour this mirrors (code that compares ``pl.__version__`` sees it).
__version__ = "2.6.6"

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "callbacks", "loggers",
           "seed_everything"]


#: Sub-packages reachable as attributes (``pl.utilities.rank_zero_only``), imported on first use.
_SUBMODULES = ("callbacks", "core", "demos", "loggers", "profilers", "trainer", "tuner", "utilities", "strategies",
               "accelerators", "plugins", "cli")


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from ember.lightning._names import lightning_trainer

        return lightning_trainer()
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
