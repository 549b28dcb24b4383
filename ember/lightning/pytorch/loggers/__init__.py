"""``lightning.pytorch.loggers``'s names: the same objects as :mod:`ember.lightning.loggers`."""

from __future__ import annotations

from ember.lightning.loggers import __all__, __getattr__  # noqa: F401
