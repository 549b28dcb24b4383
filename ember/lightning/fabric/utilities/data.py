"""``lightning.fabric.utilities.data``: what a data loader is (iterable, sized)."""

from __future__ import annotations

from torch.utils.data import IterableDataset

from ember.lightning.pytorch.utilities.combined_loader import sized_len

__all__ = ["has_iterable_dataset", "has_len", "sized_len"]


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether ``dataloader`` reads an ``IterableDataset``."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def has_len(dataloader: object) -> bool:
    """Whether ``len(dataloader)`` is defined (a loader of zero batches raises: nothing could be trained on it)."""
    length = sized_len(dataloader)
    if length == 0:
        raise ValueError(f"{type(dataloader).__name__} has no batches (len() is 0).")
    return length is not None
