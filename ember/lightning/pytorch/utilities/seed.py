"""``lightning.pytorch.utilities.seed``: ``isolate_rng``, ember's :func:`~ember.core.loop.seed.preserved_rng`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ember.core.loop.seed import preserved_rng


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Iterator[None]:
    """Run the block and then put back the random state of Python, NumPy and torch (and of the current CUDA
    device with ``include_cuda``): what the block draws does not change what comes after it."""
    device = torch.device("cuda", torch.cuda.current_device()) if include_cuda and torch.cuda.is_available() else None
    with preserved_rng(device):
        yield


__all__ = ["isolate_rng"]
