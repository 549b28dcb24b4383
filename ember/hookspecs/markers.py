"""The two pluggy markers of the ``ember`` project."""

from __future__ import annotations

import pluggy

PROJECT = "ember"

#: Marks a function in this package as a hook specification.
hookspec = pluggy.HookspecMarker(PROJECT)

#: Marks a plugin's method or function as a hook implementation (``@ember.hookimpl``). Accepts pluggy's
#: options: ``tryfirst``, ``trylast``, ``wrapper``, ``optionalhook``, ``specname``.
hookimpl = pluggy.HookimplMarker(PROJECT)
