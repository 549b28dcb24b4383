"""``lightning.pytorch.callbacks``'s names: the same objects as :mod:`ember.lightning.callbacks`."""

from __future__ import annotations

from ember.lightning.callbacks import Callback, __all__, __getattr__  # noqa: F401
