"""What the snippets of docs/*.md take as given, as fixtures a block asks for by name in its info string
(```` ```python fixture:model fixture:train_loader ````): a small classifier, its data, a trainer that fitted it.
Everything a block imports or defines itself stays in the block, so a reader can copy it."""

from __future__ import annotations

import pathlib

import pytest
from torch.utils.data import DataLoader

import ember
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_dataset


@pytest.fixture
def MyModule() -> type[TinyClassifier]:  # noqa: N802 (the name the docs give a user's module class)
    return TinyClassifier


@pytest.fixture
def model() -> TinyClassifier:
    return TinyClassifier()


@pytest.fixture
def train_loader() -> DataLoader:
    return DataLoader(tiny_dataset(32), batch_size=8, shuffle=True)


@pytest.fixture
def val_loader() -> DataLoader:
    return DataLoader(tiny_dataset(16, seed=1), batch_size=8)


@pytest.fixture
def trainer(model: TinyClassifier, train_loader: DataLoader, val_loader: DataLoader,
            tmp_path: pathlib.Path) -> ember.Trainer:
    """A trainer that has fitted ``model`` for an epoch (set up before the block moves into ``tmp_path``, so it
    is told where to write)."""
    trainer = ember.Trainer(**FAST_TRAINER_ARGS, default_root_dir=tmp_path)
    trainer.fit(model, train_loader, val_loader)
    return trainer


@pytest.fixture
def fsdp() -> None:
    """A block about FSDP: it needs torch.distributed.fsdp.fully_shard (torch 2.6 and later), else it skips."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("FSDP needs torch >= 2.6 (torch.distributed.fsdp.fully_shard)")
