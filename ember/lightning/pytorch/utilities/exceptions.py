"""``lightning.pytorch.utilities.exceptions``.

``MisconfigurationException`` is ember's :class:`~ember.core.errors.ConfigurationError`: ``except
MisconfigurationException`` catches the errors ember's Trainer raises for arguments it cannot use, and code that
raises it raises ember's error (a ``ValueError``). ``SIGTERMException`` is what ``fit`` raises at the safe point
after SIGTERM (:class:`~ember.core.loop.signals.SignalExit`, a ``SystemExit``), for ``on_exception`` to test.
"""

from __future__ import annotations

from ember.core.errors import ConfigurationError as MisconfigurationException
from ember.core.loop.signals import SignalExit as SIGTERMException

__all__ = ["MisconfigurationException", "SIGTERMException"]
