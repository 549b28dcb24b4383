"""``ember.DataModule``: an optional base for DataModules, with LightningDataModule's methods.

A DataModule needs no base class: any object with ``train_dataloader()`` (and the other ``*_dataloader``
methods it uses) works. This base adds ``save_hyperparameters``/``hparams`` (passed to the loggers with the
module's), ``prepare_data``, ``setup(stage)`` and ``teardown(stage)`` as no-ops to override, and
``state_dict``/``load_state_dict``, kept in full checkpoints (``checkpoint["plugins"]["datamodule"]``) and
restored when a fit resumes.
"""

from __future__ import annotations

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


setattr(DataModule, STYLE_ATTR, "module")
add_base_hooks(DataModule, ["prepare_data", "setup", "teardown", "on_exception", "on_before_batch_transfer",
                            "on_after_batch_transfer"])
