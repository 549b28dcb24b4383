"""The distributed sampler multi-process strategies add to the user's loaders: each rank gets its share, every
other setting of the loader is kept."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)

import ember
from ember.plugins.strategies.sampler import ShardedSampler, UnpaddedDistributedSampler, shard_loader

DATA = TensorDataset(torch.arange(10).float())


def _indices(loader: DataLoader) -> list[int]:
    return [int(i) for (batch,) in loader for i in batch]


def _collate(items: list) -> tuple:
    return (torch.stack([x for (x,) in items]),)


def test_sequential_loaders_are_split_in_order_and_keep_their_settings() -> None:
    loader = DataLoader(DATA, batch_size=2, drop_last=True, collate_fn=_collate)
    shards = [shard_loader(loader, 2, rank, "train") for rank in range(2)]
    for shard in shards:
        assert isinstance(shard.sampler, DistributedSampler) and not shard.sampler.shuffle
        assert shard.batch_size == 2 and shard.drop_last and shard.collate_fn is _collate
    assert _indices(shards[0]) == [0, 2, 4, 6] and _indices(shards[1]) == [1, 3, 5, 7]
    assert loader.sampler.__class__ is SequentialSampler  # the user's loader is untouched


def test_shuffled_loaders_stay_shuffled_with_one_order_shared_by_all_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_GLOBAL_SEED", "7")
    shards = [shard_loader(DataLoader(DATA, batch_size=5, shuffle=True), 2, r, "train") for r in range(2)]
    assert all(s.sampler.shuffle and s.sampler.seed == 7 for s in shards)
    first = [_indices(s) for s in shards]
    assert sorted(first[0] + first[1]) == list(range(10))
    assert first[0] + first[1] != list(range(10))
    for s in shards:
        s.sampler.set_epoch(1)
    assert [_indices(s) for s in shards] != first


def test_a_custom_sampler_is_sharded_by_position() -> None:
    def loader() -> DataLoader:
        g = torch.Generator().manual_seed(3)
        return DataLoader(DATA, batch_size=2, sampler=WeightedRandomSampler([1.0] * 10, 10, generator=g))

    full = _indices(loader())
    shards = [shard_loader(loader(), 2, r, "train") for r in range(2)]
    assert all(isinstance(s.sampler, ShardedSampler) for s in shards)
    assert _indices(shards[0]) == full[0::2] and _indices(shards[1]) == full[1::2]


def test_a_batch_sampler_is_rebuilt_around_the_distributed_sampler() -> None:
    loader = DataLoader(DATA, batch_sampler=BatchSampler(SequentialSampler(DATA), 3, drop_last=False))
    shard = shard_loader(loader, 2, 1, "train")
    assert isinstance(shard.batch_sampler, BatchSampler) and shard.batch_sampler.batch_size == 3
    assert _indices(shard) == [1, 3, 5, 7, 9]


def test_a_custom_batch_sampler_is_kept_with_a_warning() -> None:
    class Pairs:
        def __iter__(self) -> Any:
            return iter([[0, 1], [2, 3]])

        def __len__(self) -> int:
            return 2

    loader = DataLoader(DATA, batch_sampler=Pairs())
    with pytest.warns(ember.EmberWarning, match="every process draws the same batches"):
        assert shard_loader(loader, 2, 0, "train") is loader


def test_prediction_sees_every_sample_once() -> None:
    shards = [shard_loader(DataLoader(DATA, batch_size=4), 3, r, "predict") for r in range(3)]
    assert all(isinstance(s.sampler, UnpaddedDistributedSampler) for s in shards)
    assert sorted(i for s in shards for i in _indices(s)) == list(range(10))
    assert [len(s.sampler) for s in shards] == [4, 3, 3]
    training = [shard_loader(DataLoader(DATA, batch_size=4), 3, r, "train") for r in range(3)]
    assert [len(s.sampler) for s in training] == [4, 4, 4]  # padded: equal batch counts for the collectives


def test_loaders_that_need_no_sampler_are_returned_as_they_are() -> None:
    class Stream(IterableDataset):
        def __iter__(self) -> Any:
            return iter(range(4))

    stream = DataLoader(Stream())
    assert shard_loader(stream, 2, 0, "train") is stream
    already = DataLoader(DATA, sampler=DistributedSampler(DATA, num_replicas=2, rank=0))
    assert shard_loader(already, 2, 0, "train") is already
    assert shard_loader([1, 2], 2, 0, "train") == [1, 2]


def test_a_loader_subclass_that_cannot_be_rebuilt_is_explained() -> None:
    class Special(DataLoader):
        def __init__(self, dataset: Any, flavour: str) -> None:
            super().__init__(dataset, batch_size=2)

    with pytest.raises(ember.ConfigurationError, match="distributed_sampler=False"):
        shard_loader(Special(DATA, "vanilla"), 2, 0, "train")
