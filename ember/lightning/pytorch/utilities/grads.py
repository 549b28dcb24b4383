"""``lightning.pytorch.utilities.grads``: ``grad_norm``."""

from __future__ import annotations

from ember.lightning.pytorch.utilities import grad_norm

__all__ = ["grad_norm"]
