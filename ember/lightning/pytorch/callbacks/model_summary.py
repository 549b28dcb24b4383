"""``lightning.pytorch.callbacks.model_summary``: ember's ``ModelSummary`` callback."""

from __future__ import annotations

from ember.plugins.callbacks.model_summary import ModelSummary

__all__ = ["ModelSummary"]
