"""Giving each process its share of a data loader: the distributed sampler multi-process strategies add.

:func:`shard_loader` is the one place that decides the sampler and rebuilds the loader, so that other
features (exact resume) have one function to extend.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from ember.core.errors import ConfigurationError
from ember.core.hooks.plugin_manager import EmberWarning
from ember.core.loop.data import loader_arguments


class _Length:
    """Stands in for a dataset where ``DistributedSampler`` only needs a length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class ShardedSampler(DistributedSampler):
    """A rank's share of the indices another sampler yields each epoch (e.g. a weighted sampler).

    The inner sampler runs on every rank and must yield the same order everywhere (seed it identically);
    this rank takes every ``num_replicas``-th position, padded like ``DistributedSampler``.
    """

    def __init__(self, sampler: Sampler, num_replicas: int, rank: int, drop_last: bool = False) -> None:
        super().__init__(_Length(len(sampler)), num_replicas=num_replicas, rank=rank, shuffle=False,  # type: ignore[arg-type]
                         drop_last=drop_last)
        self.sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        indices = list(self.sampler)
        return (indices[p] for p in super().__iter__())

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        inner = getattr(self.sampler, "set_epoch", None)
        if callable(inner):
            inner(epoch)


class UnpaddedDistributedSampler(DistributedSampler):
    """``DistributedSampler`` without padding: every sample is seen once over all ranks, so ranks may get one
    sample fewer than others. For prediction, where there is no collective per batch."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
        n = len(dataset)
        self.num_samples = len(range(rank, n, num_replicas))
        self.total_size = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))


def global_seed() -> int:
    """The seed every rank shares for shuffling: ``ember.seed_everything``'s, or 0."""
    return int(os.environ.get("EMBER_GLOBAL_SEED", 0)) % 2**63


def sampler_for(loader: DataLoader, num_replicas: int, rank: int, stage: str) -> Sampler | None:
    """The distributed sampler that replaces ``loader``'s, or None where the loader should stay as it is
    (iterable datasets, a sampler that is already distributed)."""
    if isinstance(loader.dataset, IterableDataset):
        return None
    sampler: Any = loader.batch_sampler.sampler if loader.batch_size is None and isinstance(loader.batch_sampler,
                                                                                          BatchSampler) \
        else loader.sampler
    if isinstance(sampler, DistributedSampler):
        return None
    if stage == "predict":
        if not isinstance(sampler, SequentialSampler):
            return ShardedSampler(sampler, num_replicas, rank)
        return UnpaddedDistributedSampler(loader.dataset, num_replicas, rank)
    if type(sampler) is SequentialSampler:
        return DistributedSampler(loader.dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
    if type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None:
        return DistributedSampler(loader.dataset, num_replicas=num_replicas, rank=rank, shuffle=True,
                                  seed=global_seed())
    return ShardedSampler(sampler, num_replicas, rank)


def shard_loader(loader: Any, num_replicas: int, rank: int, stage: str) -> Any:
    """``loader`` rebuilt with a distributed sampler for this rank, keeping every other setting (shuffling
    included); or ``loader`` itself when it needs none. Raises :class:`ember.ConfigurationError` for a
    ``DataLoader`` subclass that cannot be rebuilt from its attributes."""
    if not isinstance(loader, DataLoader):
        return loader
    sampler = sampler_for(loader, num_replicas, rank, stage)
    if sampler is None:
        return loader
    kwargs = loader_arguments(loader)
    if loader.batch_size is not None:
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=sampler)
    elif type(loader.batch_sampler) is BatchSampler:
        kwargs["batch_sampler"] = BatchSampler(sampler, loader.batch_sampler.batch_size, loader.batch_sampler.drop_last)
    else:
        warnings.warn(f"the data loader's batch sampler {type(loader.batch_sampler).__name__} is custom, so ember "
                      "cannot give each process its share of the data: every process draws the same batches unless "
                      "the batch sampler splits them by rank itself.", EmberWarning, stacklevel=2)
        return loader
    try:
        return type(loader)(**kwargs)
    except TypeError as exc:
        raise ConfigurationError(
            f"cannot add a distributed sampler to the {stage} loader: {type(loader).__name__}(...) does not accept "
            f"DataLoader's arguments ({exc}). Give it a torch DistributedSampler yourself, or turn the automatic "
            "sampler off with strategy=DDPStrategy(distributed_sampler=False).") from exc

