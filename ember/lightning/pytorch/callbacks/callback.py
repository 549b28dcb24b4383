"""``lightning.pytorch.callbacks.callback``: ``Callback``, the optional base of a callback."""

from __future__ import annotations

from ember.core.api.callback import Callback

__all__ = ["Callback"]
