"""``lightning.fabric.utilities.exceptions``: ``MisconfigurationException`` (ember's ``ConfigurationError``)."""

from __future__ import annotations

from ember.lightning.pytorch.utilities.exceptions import MisconfigurationException

__all__ = ["MisconfigurationException"]
