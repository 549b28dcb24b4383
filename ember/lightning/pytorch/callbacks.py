"""``lightning.pytorch.callbacks``'s names: the same objects as :mod:`ember.lightning.callbacks`."""

from __future__ import annotations

from ember.lightning.callbacks import __all__, __getattr__  # noqa: F401
from ember.lightning.callbacks import Callback  # noqa: F401
