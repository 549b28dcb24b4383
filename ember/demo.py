"""The built-in demo: an MLP on scikit-learn's bundled 8x8 digits (1,797 images, no download).

``ember demo`` trains it with the default progress bar, CSV logger and model summary, prints the validation
accuracy, and draws the training curves to ``curves.png`` next to ``metrics.csv``. The pieces are importable
for the CLI too: ``ember fit --model ember.demo:DigitsClassifier --data ember.demo:DigitsData``. The curves
are drawn by :func:`ember.plot.save_curves` (also ``ember plot <run dir>``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.plot import save_curves


def digits_loaders(batch_size: int = 64, seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """(train, val) loaders: a fixed 80/20 split of the digits, pixels scaled to [0, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise SystemExit("the demo needs scikit-learn: pip install 'ember[demo]'") from exc
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    split = int(0.8 * len(x))
    train, val = order[:split], order[split:]
    return (DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True),
            DataLoader(TensorDataset(x[val], y[val]), batch_size=256))


class DigitsData:
    """The digits as a DataModule: a fixed 80/20 split (``seed``), batches of ``batch_size``."""

    def __init__(self, batch_size: int = 64, seed: int = 0) -> None:
        self.batch_size = batch_size
        self.seed = seed
        self.hparams = {"batch_size": batch_size, "data_seed": seed}
        self._loaders: tuple[DataLoader, DataLoader] | None = None

    def setup(self, stage: str) -> None:
        if self._loaders is None:
            self._loaders = digits_loaders(self.batch_size, self.seed)

    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        assert self._loaders is not None
        return self._loaders[0]

    def val_dataloader(self) -> DataLoader:
        self.setup("validate")
        assert self._loaders is not None
        return self._loaders[1]

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        x = self.val_dataloader().dataset.tensors[0]  # type: ignore[attr-defined]
        return DataLoader(TensorDataset(x), batch_size=256)


class DigitsClassifier(ember.Module):
    """64 -> 128 -> 10 MLP with dropout."""

    def __init__(self, hidden: int = 128, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(1)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        epochs = self.trainer.max_epochs if self.__dict__.get("_trainer") is not None else -1
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs if epochs and epochs > 0 else 30)
        return {"optimizer": opt, "lr_scheduler": sched}


def run_demo(max_epochs: int = 30, seed: int = 0, plot: bool = True, **trainer_args: Any) -> float:
    """Train, print where the logs and the curves went, and return the final validation accuracy."""
    ember.seed_everything(seed)
    trainer_args.setdefault("log_every_n_steps", 10)
    if trainer_args.get("logger", True) is True:
        from ember.plugins.loggers.csv_logger import CSVLogger

        trainer_args["logger"] = CSVLogger(name="demo")
    trainer = ember.Trainer(max_epochs=max_epochs, **trainer_args)
    trainer.fit(DigitsClassifier(), datamodule=DigitsData(seed=seed))
    accuracy = float(trainer.callback_metrics["val_acc"])
    metrics_path = getattr(trainer.logger, "metrics_path", None)
    if metrics_path and os.path.exists(metrics_path):
        print(f"logs: {trainer.log_dir}")
        if plot:
            png = save_curves(metrics_path, os.path.join(os.path.dirname(metrics_path), "curves.png"))
            if png:
                print(f"training curves: {png}")
    for path in _checkpoints(trainer):
        print(f"checkpoint: {path}")
    return accuracy


def _checkpoints(trainer: Any) -> list[str]:
    """The files written by checkpointing callbacks (any plugin with a ``best_model_path``)."""
    paths = []
    for plugin in trainer.callbacks:
        path = getattr(plugin, "best_model_path", None) or getattr(plugin, "last_model_path", None)
        if path and path not in paths:
            paths.append(path)
    return paths
