"""``precision.16-true``: parameters, inputs and new tensors in float16 (no loss scaling)."""

from __future__ import annotations

import torch

from ember.plugins.precision.fp64_true import FP64True


class FP16True(FP64True):
    identity = "precision.16-true"
    dtype = torch.float16
