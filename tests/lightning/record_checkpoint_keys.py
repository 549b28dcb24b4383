"""Records what a checkpoint file holds as Lightning code reads it, for tests/test_lightning_compat_ckptkeys.py: the
top-level keys, the keys of ``callbacks`` (each callback's ``state_key``) and of the ModelCheckpoint's state, the
DataModule's entry, ``epoch``, ``global_step`` and the scheduler's ``_step_count`` of each file a fit with a monitored
``ModelCheckpoint`` (``save_top_k=-1``), an ``EarlyStopping``, a stateful callback and a stateful DataModule writes.

The scenario takes the framework's ``pytorch`` module, so that the test runs the very same code on
``ember.lightning.pytorch``. Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_checkpoint_keys.py tests/lightning/checkpoint_keys.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from typing import Any

import torch


def scenario(pl: Any, load: Any) -> dict[str, Any]:
    """What the files of the fit hold; ``load(path)`` reads one (Lightning's ``cloud_io._load``)."""
    from torch.utils.data import DataLoader, TensorDataset

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)

        def state_dict(self) -> dict[str, Any]:
            return {"seen": 5}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    class Counter(pl.Callback):
        def state_dict(self) -> dict[str, Any]:
            return {"count": 1}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            pass

    class Model(pl.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val", 1.0 / (1 + self.current_epoch))

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)]

    folder = tempfile.mkdtemp()
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, monitor="val", save_top_k=-1, filename="{epoch}")
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=folder,
                         callbacks=[checkpoint, pl.callbacks.EarlyStopping(monitor="val"), Counter()])
    trainer.fit(Model(), datamodule=Data())
    files: dict[str, Any] = {}
    for name in sorted(os.listdir(folder)):
        ckpt = load(os.path.join(folder, name))
        state = ckpt["callbacks"][checkpoint.state_key]
        files[name] = {"keys": sorted(ckpt), "callbacks": sorted(ckpt["callbacks"]),
                       "checkpoint state": sorted(state), "current_score": float(state["current_score"]),
                       "dirpath is the callback's": state["dirpath"] == checkpoint.dirpath,
                       "datamodule": ckpt.get(Data.__qualname__), "epoch": ckpt["epoch"], "global_step": ckpt["global_step"],
                       "scheduler step count": ckpt["lr_schedulers"][0]["_step_count"],
                       "hyper_parameters": ckpt["hyper_parameters"],
                       "optimizer_states": [sorted(s) for s in ckpt["optimizer_states"]]}
    return files


if __name__ == "__main__":
    import lightning
    import lightning.pytorch
    from lightning.fabric.utilities.cloud_io import _load

    warnings.filterwarnings("ignore")
    recorded = {"lightning": lightning.__version__, "recorded": scenario(lightning.pytorch, _load)}
    with open(sys.argv[1], "w") as f:
        json.dump(recorded, f, indent=1)
        f.write("\n")
