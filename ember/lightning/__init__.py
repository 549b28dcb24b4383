"""Lightning's names for ember's objects: port a Lightning project by changing its imports.

``import lightning as L`` becomes ``import ember.lightning as L``; ``import lightning.pytorch as pl`` becomes
``import ember.lightning.pytorch as pl``; ``from lightning.pytorch.callbacks import ...`` becomes
``from ember.lightning.callbacks import ...`` (or ``ember.lightning.pytorch.callbacks``). Every name is an
alias of ember's own class (``L.Trainer is ember.Trainer``), not a second implementation; docs/lightning.md
says what differs. Nothing here is imported by ``import ember``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.core.api.callback import Callback
from ember.core.api.datamodule import DataModule as LightningDataModule
from ember.core.api.module import Module as LightningModule
from ember.core.loop.seed import seed_everything

if TYPE_CHECKING:
    from ember.core.api.trainer import Trainer  # given by __getattr__: see ember.lightning._names.lightning_trainer

#: The Lightning release whose names and behaviour this mirrors (code that compares ``pl.__version__`` sees it).
__version__ = "2.6.6"

__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "callbacks", "loggers", "pytorch",
           "seed_everything"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from ember.lightning._names import lightning_trainer

        return lightning_trainer()
    # ``L.pytorch``, ``L.callbacks``, ``L.loggers`` as attributes, imported on first use (loggers are heavy)
    if name in ("callbacks", "loggers", "pytorch"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
