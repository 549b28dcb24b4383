"""``lightning.pytorch.demos.boring_classes``: the small random models and data Lightning's examples and tests
are written with, on ember's classes.

``BoringModel`` is a ``Linear(32, 2)`` trained to output ones (an MSE loss) with SGD (lr 0.1) and a ``StepLR``;
its loaders hold 64 random vectors of 32 features, one per batch. The datasets draw from torch's global
generator when built, so ``seed_everything`` makes them repeatable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from ember.core.api.datamodule import DataModule as LightningDataModule
from ember.core.api.module import Module as LightningModule
from ember.core.loop.training import ManualOptimizer as LightningOptimizer
from ember.lightning.pytorch.utilities.types import STEP_OUTPUT


def apply_to_collection(data: Any, dtype: type | tuple[type, ...], function: Any, *args: Any,
                        wrong_dtype: type | tuple[type, ...] | None = None, **kwargs: Any) -> Any:
    """``function(x, *args, **kwargs)`` for every ``x`` of type ``dtype`` in nested dicts, lists, tuples
    (namedtuples kept); other values are returned as they are."""
    if isinstance(data, dtype) and (wrong_dtype is None or not isinstance(data, wrong_dtype)):
        return function(data, *args, **kwargs)
    if isinstance(data, dict):
        return type(data)({k: apply_to_collection(v, dtype, function, *args, wrong_dtype=wrong_dtype, **kwargs)
                           for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(apply_to_collection(v, dtype, function, *args, wrong_dtype=wrong_dtype, **kwargs)
                            for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_collection(v, dtype, function, *args, wrong_dtype=wrong_dtype, **kwargs)
                          for v in data)
    return data


class RandomDataset(Dataset):
    """``length`` random vectors of ``size`` features (a tensor each)."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(Dataset):
    """``length`` items ``{"a": v, "b": v + 2}`` of random vectors ``v`` of ``size`` features."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        a = self.data[index]
        return {"a": a, "b": a + 2}

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset):
    """``count`` random vectors of ``size`` features, drawn as they are iterated; no length."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """:class:`RandomIterableDataset` with a length (``count``)."""

    def __len__(self) -> int:
        return self.count


class BoringModel(LightningModule):
    """A module to subclass in tests and examples: override the one method a test is about."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def loss(self, preds: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """MSE against ``labels`` (ones when None): any loss that moves the weights."""
        return torch.nn.functional.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Any) -> torch.Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> tuple[list[Optimizer], list[LRScheduler]]:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """:class:`BoringModel` stepping its optimizer itself (``automatic_optimization = False``)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        opt = self.optimizers()
        loss = self.step(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


class DemoModel(LightningModule):
    """``relu(Linear(32, out_dim))`` trained with Adam to lower the sum of its outputs."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
        return self(batch).sum()

    def configure_optimizers(self) -> Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class _SplitDataModule(LightningDataModule):
    """A DataModule whose ``*_dataloader()`` wrap the dataset its ``setup(stage)`` made for that stage."""

    random_train: Any
    random_val: Any
    random_test: Any
    random_predict: Any

    def _make(self, stage: str) -> Any:
        raise NotImplementedError

    def setup(self, stage: str) -> None:
        for name in {"fit": ("train", "val"), "validate": ("val",), "test": ("test",),
                     "predict": ("predict",)}.get(stage, ()):
            setattr(self, f"random_{name}", self._make(name))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class BoringDataModule(_SplitDataModule):
    """256 random vectors of 32 features: four disjoint quarters for train, val, test and predict."""

    _QUARTER = {"train": 0, "val": 1, "test": 2, "predict": 3}

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def _make(self, stage: str) -> Any:
        start = 64 * self._QUARTER[stage]
        return Subset(self.random_full, indices=range(start, start + 64))


class BoringDataModuleNoLen(_SplitDataModule):
    """Iterable random data without a length: 512 train, 128 val, 256 test and 64 predict vectors."""

    _COUNT = {"train": 512, "val": 128, "test": 256, "predict": 64}

    def _make(self, stage: str) -> Any:
        return RandomIterableDataset(32, self._COUNT[stage])


class IterableBoringDataModule(LightningDataModule):
    """Two loaders per stage, one sized and one iterable, of vectors with 4 features (16 train, 32 val, 64 test,
    128 predict items each)."""

    _COUNT = {"train": 16, "val": 32, "test": 64, "predict": 128}

    def setup(self, stage: str) -> None:
        for name in {"fit": ("train", "val"), "validate": ("val",), "test": ("test",),
                     "predict": ("predict",)}.get(stage, ()):
            n = self._COUNT[name]
            setattr(self, f"{name}_datasets", [RandomDataset(4, n), RandomIterableDataset(4, n)])

    def _loaders(self, name: str) -> Any:
        return apply_to_collection(getattr(self, f"{name}_datasets"), Dataset, DataLoader)

    def train_dataloader(self) -> Any:
        return self._loaders("train")

    def val_dataloader(self) -> Any:
        return self._loaders("val")

    def test_dataloader(self) -> Any:
        return self._loaders("test")

    def predict_dataloader(self) -> Any:
        return self._loaders("predict")


class Net(torch.nn.Module):
    """A small convolutional classifier of 28x28 grey images into 10 classes (log-probabilities)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(9216, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.nn.functional
        x = torch.flatten(self.dropout1(f.max_pool2d(f.relu(self.conv2(f.relu(self.conv1(x)))), 2)), 1)
        return f.log_softmax(self.fc2(self.dropout2(f.relu(self.fc1(x)))), dim=1)


__all__ = ["BoringDataModule", "BoringDataModuleNoLen", "DataLoader", "Dataset", "DemoModel",
           "IterableBoringDataModule", "IterableDataset", "LRScheduler", "LightningDataModule", "LightningModule",
           "LightningOptimizer", "ManualOptimBoringModel", "Net", "Optimizer", "RandomDataset", "RandomDictDataset",
           "RandomIterableDataset", "RandomIterableDatasetWithLen", "STEP_OUTPUT", "Subset", "apply_to_collection"]
