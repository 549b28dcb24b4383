"""``lightning.pytorch.callbacks.model_checkpoint``: ``ModelCheckpoint`` with Lightning's defaults.

It is ember's callback (:mod:`ember.plugins.callbacks.model_checkpoint`) with the arguments in Lightning's order
and two of Lightning's choices: ``save_last`` defaults to None (no ``last.ckpt`` unless asked for), and a
``last.ckpt`` that another run left in the folder is kept, this run's going to ``last-v1.ckpt``. Every ember
``ModelCheckpoint`` (the Trainer's default one included) counts as an instance of it.
"""

# No ``from __future__ import annotations``: the signature's annotations are real types, which argument parsers
# (jsonargparse, LightningCLI) read.
import os
import time
from datetime import timedelta
from typing import Any, Literal

from ember.core.errors import ConfigurationError
from ember.plugins.callbacks import model_checkpoint as _ember


class _AnyModelCheckpoint(type):
    """``isinstance(x, ModelCheckpoint)`` holds for every ember ``ModelCheckpoint``, as Lightning code expects of
    the Trainer's default callback."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls.__dict__.get("_covers_ember", False):  # the class itself, not a user's subclass of it
            return isinstance(obj, _ember.ModelCheckpoint)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        if cls.__dict__.get("_covers_ember", False):
            return issubclass(sub, _ember.ModelCheckpoint)
        return super().__subclasscheck__(sub)


class ModelCheckpoint(_ember.ModelCheckpoint, metaclass=_AnyModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` signature and defaults (see the module docstring)."""

    version_last = True
    _covers_ember = True

    @staticmethod
    def _now() -> float:
        return time.monotonic()  # this module's ``time``, as Lightning's callback reads it

    def setup(self, trainer: Any, pl_module: Any = None, stage: str | None = None) -> None:
        if self.save_last == "link" and "://" in self._dirpath_as_given:
            raise ConfigurationError(f"ModelCheckpoint(save_last='link') links files, which is only supported for "
                                     f"local file paths; {self._dirpath_as_given!r} is not one. Use save_last=True.")
        super().setup(trainer, pl_module, stage)

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 monitor: str | None = None, verbose: bool = False, save_last: bool | Literal["link"] | None = None,
                 save_top_k: int = 1, save_on_exception: bool = False, save_weights_only: bool = False,
                 mode: str = "min", auto_insert_metric_name: bool = True, every_n_train_steps: int | None = None,
                 train_time_interval: timedelta | None = None, every_n_epochs: int | None = None,
                 save_on_train_epoch_end: bool | None = None, enable_version_counter: bool = True) -> None:
        super().__init__(dirpath=dirpath, filename=filename, monitor=monitor, verbose=verbose,
                         save_last=save_last,  # type: ignore[arg-type]
                         save_top_k=save_top_k, save_weights_only=save_weights_only, mode=mode,
                         auto_insert_metric_name=auto_insert_metric_name, every_n_train_steps=every_n_train_steps,
                         train_time_interval=train_time_interval, every_n_epochs=every_n_epochs,
                         save_on_train_epoch_end=save_on_train_epoch_end,
                         enable_version_counter=enable_version_counter, save_on_exception=save_on_exception)
        self._dirpath_as_given = os.fspath(dirpath) if dirpath is not None else ""


__all__ = ["ModelCheckpoint"]
