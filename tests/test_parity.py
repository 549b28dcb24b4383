"""Parity with the loop a user writes by hand: same seed, model (with dropout), shuffled DataLoader and
optimizer give bitwise-equal weights.

ember reads the loader exactly like ``for batch in loader``, so the global random stream (which a
shuffled DataLoader and dropout both draw from) is consumed in the same order as in the plain loop.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.testing import tiny_dataset

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}

EPOCHS = 3


class Net(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                       torch.nn.Linear(32, 3))

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


#: How the train loader shuffles: from the global random stream, or from its own generator. With its own
#: generator and a dataset that divides into whole batches, the sampler draws its next permutation only
#: when the loop asks for a batch after the last one: a loop that stops at len(loader) skips that draw and
#: shuffles differently from the next epoch on.
SHUFFLES = {
    "global stream, incomplete last batch": dict(n=44, own_generator=False),
    "global stream, whole batches": dict(n=48, own_generator=False),
    "own generator, incomplete last batch": dict(n=44, own_generator=True),
    "own generator, whole batches": dict(n=48, own_generator=True),
}


def loaders(n: int = 48, own_generator: bool = True, batch_size: int = 8) -> tuple[DataLoader, DataLoader]:
    """A shuffled train loader, and a plain validation loader."""
    data = tiny_dataset(n=n)
    val = TensorDataset(*tiny_dataset(n=16, seed=1).tensors)
    generator = torch.Generator().manual_seed(99) if own_generator else None
    return (DataLoader(data, batch_size=batch_size, shuffle=True, generator=generator),
            DataLoader(val, batch_size=8))


def plain_loop(k: int = 1, validate: bool = False, **shuffle: Any) -> dict[str, torch.Tensor]:
    torch.manual_seed(1234)
    model = Net()
    opt = model.configure_optimizers()
    train, val = loaders(**shuffle)
    for _ in range(EPOCHS):
        model.train()
        for i, batch in enumerate(train):
            loss = model.loss(batch) / k
            loss.backward()
            if (i + 1) % k == 0 or i + 1 == len(train):
                opt.step()
                opt.zero_grad()
        if validate:
            model.eval()
            with torch.no_grad():
                for batch in val:
                    model.loss(batch)
    return model.state_dict()


def ember_fit(k: int = 1, validate: bool = False, shuffle: dict[str, Any] | None = None,
              **kwargs: Any) -> dict[str, torch.Tensor]:
    torch.manual_seed(1234)
    model = Net()
    train, val = loaders(**(shuffle or {}))
    trainer = ember.Trainer(**QUIET, max_epochs=EPOCHS, accumulate_grad_batches=k, **kwargs)
    trainer.fit(model, train, val if validate else None)
    return model.state_dict()


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("shuffle", list(SHUFFLES))
def test_fit_matches_the_plain_loop_bitwise(shuffle: str) -> None:
    assert_bitwise_equal(ember_fit(shuffle=SHUFFLES[shuffle]), plain_loop(**SHUFFLES[shuffle]))


def test_the_comparison_is_sensitive() -> None:
    """A single extra draw from the global random stream changes the result, so equality above means
    the streams were consumed identically."""
    torch.manual_seed(1234)
    model = Net()
    torch.rand(1)
    train, _ = loaders()
    ember.Trainer(**QUIET, max_epochs=EPOCHS).fit(model, train)
    with pytest.raises(AssertionError):
        assert_bitwise_equal(model.state_dict(), plain_loop())


@pytest.mark.parametrize("k", [2, 4])
def test_accumulation_matches_the_plain_loop_bitwise(k: int) -> None:
    # 6 batches per epoch: with k=4 the last window is incomplete
    assert_bitwise_equal(ember_fit(k=k), plain_loop(k=k))


def test_validation_each_epoch_matches_the_plain_loop_bitwise() -> None:
    assert_bitwise_equal(ember_fit(validate=True, num_sanity_val_steps=0), plain_loop(validate=True))


def test_the_sanity_check_leaves_the_random_stream_untouched() -> None:
    assert_bitwise_equal(ember_fit(validate=True, num_sanity_val_steps=2), plain_loop(validate=True))


def test_limit_train_batches_matches_a_plain_loop_that_stops_early() -> None:
    """With a limit, ember stops reading the loader early, as ``break`` does in a plain loop."""
    torch.manual_seed(1234)
    model = Net()
    opt = model.configure_optimizers()
    train, _ = loaders()
    for _ in range(EPOCHS):
        for i, batch in enumerate(train):
            opt.zero_grad()
            model.loss(batch).backward()
            opt.step()
            if i + 1 == 3:
                break
    expected = model.state_dict()
    assert_bitwise_equal(ember_fit(limit_train_batches=3), expected)


def test_evaluation_reads_its_loaders_like_a_for_loop() -> None:
    """A shuffled validation loader with its own generator shows the same order, run after run, as when a
    plain loop reads it."""
    def make() -> DataLoader:
        return DataLoader(tiny_dataset(n=16), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(5))

    expected = [[batch[1].tolist() for batch in loader] for loader in [make()] for _ in range(3)]
    seen: list[list[list[int]]] = []

    class Records(Net):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if batch_idx == 0:
                seen.append([])
            seen[-1].append(batch[1].tolist())

    loader = make()
    trainer = ember.Trainer(**QUIET)
    for _ in range(3):
        trainer.validate(Records(), loader, verbose=False)
    assert seen == expected
