"""``ember.DataModule``: an optional base for DataModules, with LightningDataModule's methods.

A DataModule needs no base class: any object with ``train_dataloader()`` (and the other ``*_dataloader``
methods it uses) works. This base adds ``save_hyperparameters``/``hparams`` (passed to the loggers with the
module's), ``prepare_data``, ``setup(stage)`` and ``teardown(stage)`` as no-ops to override, and
``state_dict``/``load_state_dict``, kept in full checkpoints (``checkpoint["plugins"]["datamodule"]``) and
restored when a fit resumes.
"""

from __future__ import annotations

import inspect
from typing import Any

from ember.core.module import AttributeDict, hparams_of_caller
from ember.core.positional import STYLE_ATTR, add_base_hooks, base_hook


class DataModule:
    """Subclass and define ``train_dataloader()``, ``val_dataloader()``, ... and the hooks you need."""

    #: The Trainer running this DataModule (set by ``trainer.fit``/``validate``/... ; None before).
    trainer: Any = None

    @property
    def hparams(self) -> AttributeDict:
        """What :meth:`save_hyperparameters` stored."""
        return self.__dict__.setdefault("_hparams", AttributeDict())

    def save_hyperparameters(self, *args: Any, ignore: str | list[str] | None = None, frame: Any = None,
                             logger: bool = True) -> None:
        """Store the ``__init__`` arguments of the caller in ``self.hparams`` (all, or those named; ``ignore``
        removes names). ``logger=False`` keeps them from the loggers."""
        if frame is None:
            current = inspect.currentframe()
            assert current is not None and current.f_back is not None
            frame = current.f_back
        self.hparams.update(hparams_of_caller(frame, args, ignore))
        self.__dict__["_log_hyperparams"] = logger

    @base_hook
    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints (override; the default keeps none)."""
        return {}

    @base_hook
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (override)."""


setattr(DataModule, STYLE_ATTR, "module")
add_base_hooks(DataModule, ["prepare_data", "setup", "teardown", "on_exception", "on_before_batch_transfer",
                            "on_after_batch_transfer"])
