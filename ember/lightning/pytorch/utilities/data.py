"""``lightning.pytorch.utilities.data``: what a data loader is, on one process or all of them."""

from __future__ import annotations

from typing import Any

from ember.lightning.fabric.utilities.data import has_iterable_dataset, has_len, sized_len

__all__ = ["has_iterable_dataset", "has_len", "has_len_all_ranks", "sized_len"]


def has_len_all_ranks(dataloader: object, strategy: Any = None,
                      allow_zero_length_dataloader_with_multiple_devices: bool = False) -> bool:
    """Whether ``len(dataloader)`` is defined. A loader that is empty on every process raises unless allowed
    (``strategy`` is accepted for Lightning's signature: ember's loaders have the same length on every rank)."""
    length = sized_len(dataloader)
    if length == 0 and not allow_zero_length_dataloader_with_multiple_devices:
        raise ValueError(f"{type(dataloader).__name__} has no batches on any process (len() is 0).")
    return length is not None
