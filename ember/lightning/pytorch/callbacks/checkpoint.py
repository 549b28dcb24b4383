"""``Checkpoint``: the base class Lightning's ``ModelCheckpoint`` derives from, for ``isinstance`` tests and for
custom checkpoint callbacks."""

from __future__ import annotations

from abc import ABCMeta
from typing import Any

from ember.core.api.callback import Callback
from ember.core.checkpointing.checkpoint import is_checkpoint_callback


class _CheckpointMeta(ABCMeta):
    def __instancecheck__(cls, instance: Any) -> bool:
        # ember's ModelCheckpoint is a plugin, not a Callback subclass: it is a Checkpoint as the Trainer sees it
        return super().__instancecheck__(instance) or (cls is Checkpoint and is_checkpoint_callback(instance))


class Checkpoint(Callback, metaclass=_CheckpointMeta):
    """Base of checkpoint callbacks. ``isinstance(cb, Checkpoint)`` is True for ember's ``ModelCheckpoint`` and
    for any callback with a ``best_model_path`` (what ``trainer.checkpoint_callbacks`` lists)."""


__all__ = ["Checkpoint"]
