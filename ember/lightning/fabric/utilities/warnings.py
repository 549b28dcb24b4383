"""``lightning.fabric.utilities.warnings``: ``PossibleUserWarning``, the class of warnings about a setting that may
be a mistake (filter it to silence them)."""

from __future__ import annotations

from ember.lightning.pytorch.utilities import PossibleUserWarning

__all__ = ["PossibleUserWarning"]
