"""Records Lightning's learning-rate finder on a fixed model and data set, for tests/test_tuner.py.

Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_lr_find.py > tests/lightning/lr_find.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ember.testing import tiny_dataset  # noqa: E402  (data only: plain torch tensors)

SETTINGS = {"min_lr": 1e-4, "max_lr": 1.0, "num_training": 30, "early_stop_threshold": None, "batch_size": 16}


def net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def main() -> None:
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net()
            self.lr = 0.1

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    warnings.filterwarnings("ignore")
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, max_epochs=10)
    loader = DataLoader(tiny_dataset(256), batch_size=SETTINGS["batch_size"])
    finder = Tuner(trainer).lr_find(Lit(), train_dataloaders=loader, min_lr=SETTINGS["min_lr"],
                                    max_lr=SETTINGS["max_lr"], num_training=SETTINGS["num_training"],
                                    early_stop_threshold=SETTINGS["early_stop_threshold"], update_attr=False)
    json.dump({"lightning": L.__version__, "torch": torch.__version__, "settings": SETTINGS,
               "lr": finder.results["lr"], "loss": finder.results["loss"], "suggestion": finder.suggestion()},
              sys.stdout, indent=1)


if __name__ == "__main__":
    main()
