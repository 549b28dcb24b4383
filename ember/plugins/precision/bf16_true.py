"""``precision.bf16-true``: parameters, inputs and new tensors in bfloat16 (no float32 master weights)."""

from __future__ import annotations

import torch

from ember.plugins.precision.fp64_true import FP64True


class BF16True(FP64True):
    identity = "precision.bf16-true"
    dtype = torch.bfloat16
