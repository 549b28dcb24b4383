"""The built-in demo: an MLP on scikit-learn's bundled 8x8 digits (1,797 images, no download)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember


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

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)}


def run_demo(max_epochs: int = 30, seed: int = 0, **trainer_args: Any) -> float:
    """Train and return the final validation accuracy."""
    ember.seed_everything(seed)
    train, val = digits_loaders(seed=seed)
    model = DigitsClassifier()
    trainer = ember.Trainer(max_epochs=max_epochs, **trainer_args)
    trainer.fit(model, train, val)
    return float(trainer.callback_metrics["val_acc"])
