"""An autoencoder fed by a LightningDataModule, with a plateau scheduler, early stopping and checkpointing on
the validation loss, then tested from the best checkpoint."""

import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class NoiseDataModule(L.LightningDataModule):
    def __init__(self, data_dir: str, batch_size: int = 16, features: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.stages = []

    def prepare_data(self):
        path = os.path.join(self.hparams.data_dir, "noise.pt")
        if not os.path.exists(path):
            g = torch.Generator().manual_seed(3)
            torch.save({"train": torch.randn(80, self.hparams.features, generator=g),
                        "test": torch.randn(24, self.hparams.features, generator=g)}, path)

    def setup(self, stage):
        self.stages.append(stage)
        data = torch.load(os.path.join(self.hparams.data_dir, "noise.pt"), weights_only=True)
        if stage == "fit":
            full = TensorDataset(data["train"])
            self.train_set, self.val_set = random_split(full, [64, 16], generator=torch.Generator().manual_seed(4))
        if stage == "test":
            self.test_set = TensorDataset(data["test"])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class AutoEncoder(L.LightningModule):
    def __init__(self, features: int = 8, hidden: int = 3, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.Tanh())
        self.decoder = nn.Linear(hidden, features)

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def _loss(self, batch):
        (x,) = batch
        return F.mse_loss(self(x), x)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


def main(root, callbacks):
    L.seed_everything(11)
    dm = NoiseDataModule(str(root))
    model = AutoEncoder()
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), monitor="val_loss", mode="min", save_top_k=1)
    stopping = EarlyStopping(monitor="val_loss", patience=1, min_delta=0.02)
    trainer = L.Trainer(max_epochs=12, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root,
                        callbacks=[checkpoint, stopping, *callbacks])
    trainer.fit(model, datamodule=dm)
    lrs = [group["lr"] for group in trainer.optimizers[0].param_groups]
    tested = trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)
    return {"trainer": trainer, "model": model, "test": tested, "lr": lrs,
            "best_model_score": checkpoint.best_model_score,
            "best_model_file": os.path.basename(checkpoint.best_model_path),
            "stopped_epoch": stopping.stopped_epoch, "stages": dm.stages,
            "dm_hparams": {k: v for k, v in dm.hparams.items() if k != "data_dir"}}
