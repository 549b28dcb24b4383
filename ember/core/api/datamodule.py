"""``ember.DataModule``: an optional base for DataModules, with LightningDataModule's methods.

A DataModule needs no base class: any object with ``train_dataloader()`` (and the other ``*_dataloader``
methods it uses) works. This base adds ``save_hyperparameters``/``hparams`` (passed to the loggers with the
module's), ``prepare_data``, ``setup(stage)`` and ``teardown(stage)`` as no-ops to override, and
``state_dict``/``load_state_dict``, kept in full checkpoints (``checkpoint["plugins"]["datamodule"]``) and
restored when a fit resumes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sized
from typing import Any

from ember.core.api.module import HyperparametersMixin
from ember.core.hooks.positional import STYLE_ATTR, add_base_hooks, base_hook


class DataModule(HyperparametersMixin):
    """Subclass and define ``train_dataloader()``, ``val_dataloader()``, ... and the hooks you need."""

    #: The Trainer running this DataModule (set by ``trainer.fit``/``validate``/... ; None before).
    trainer: Any = None

    @base_hook
    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints (override; the default keeps none)."""
        return {}

    @base_hook
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (override)."""

    def __str__(self) -> str:
        """One line per dataloader method, with the size of each dataset it gives (``{Train dataloader:
        size=64}``), or None where the method is missing or fails (before ``setup``, say)."""
        lines = []
        for label, method in (("Train", "train_dataloader"), ("Validation", "val_dataloader"),
                              ("Test", "test_dataloader"), ("Predict", "predict_dataloader")):
            try:
                loaders = getattr(self, method)()
            except Exception:
                text = "None"
            else:
                if isinstance(loaders, Mapping):
                    loaders = list(loaders.values())
                if isinstance(loaders, (list, tuple)):
                    text = " ; ".join(f"{i}. {_size(loader)}" for i, loader in enumerate(loaders, start=1))
                else:
                    text = _size(loaders)
            lines.append(f"{{{label} dataloader: {text}}}")
        return os.linesep.join(lines)


def _size(loader: Any) -> str:
    dataset = getattr(loader, "dataset", None)
    return f"size={len(dataset)}" if isinstance(dataset, Sized) else "size=NA"


setattr(DataModule, STYLE_ATTR, "module")
add_base_hooks(DataModule, ["prepare_data", "setup", "teardown", "on_exception", "on_before_batch_transfer",
                            "on_after_batch_transfer"])
