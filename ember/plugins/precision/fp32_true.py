"""``precision.32-true``: float32 everywhere, the PyTorch default. Changes nothing."""

from __future__ import annotations


class FP32True:
    role = "precision"
    identity = "precision.32-true"
