"""A DataModule with two validation sets and a predict set, a metric collection logged with log_dict, metrics
per dataloader, a named scheduler dict, partial epochs, validation every second epoch, and weights-only
checkpoints every few steps."""

import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
import torchmetrics
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TwoDomains(pl.LightningDataModule):
    num_classes = 3

    def __init__(self, batch_size: int = 8):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage):
        g = torch.Generator().manual_seed(12)
        x = torch.randn(72, 4, generator=g)
        y = torch.randint(0, self.num_classes, (72,), generator=g)
        if stage in ("fit", "validate"):
            self.train_set = TensorDataset(x[:48], y[:48])
            self.val_sets = [TensorDataset(x[48:60], y[48:60]), TensorDataset(x[60:] * 2, y[60:])]
        if stage == "predict":
            self.predict_set = TensorDataset(x[60:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return [DataLoader(ds, batch_size=6) for ds in self.val_sets]

    def predict_dataloader(self):
        return DataLoader(self.predict_set, batch_size=5)


class Tagger(pl.LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = None
        self.metrics = None

    def setup(self, stage):
        if self.net is None:
            classes = self.trainer.datamodule.num_classes
            self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, classes))
            self.metrics = torchmetrics.MetricCollection({
                "acc": torchmetrics.Accuracy(task="multiclass", num_classes=classes),
                "f1": torchmetrics.F1Score(task="multiclass", num_classes=classes, average="macro"),
            }, prefix="train_")

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log_dict(self.metrics(logits, y), on_step=False, on_epoch=True)
        self.log("max_loss", loss, reduce_fx="max", on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("val_loss", loss)
        self.log(f"val_loss_domain{dataloader_idx}", loss, add_dataloader_idx=False)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        (x,) = batch
        return self(x).softmax(dim=-1)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 5], gamma=0.3)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 2, "name": "steps"}}


def main(root, callbacks):
    pl.seed_everything(4)
    dm = TwoDomains()
    model = Tagger()
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "weights"), save_weights_only=True,
                                 every_n_train_steps=3, save_top_k=-1, save_last=False)
    trainer = pl.Trainer(max_epochs=4, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root, limit_train_batches=0.5,
                         check_val_every_n_epoch=2, num_sanity_val_steps=0, callbacks=[checkpoint, *callbacks])
    trainer.fit(model, datamodule=dm)
    validated = trainer.validate(model, datamodule=dm, verbose=False)
    predictions = trainer.predict(model, datamodule=dm)
    saved = torch.load(checkpoint.best_model_path or checkpoint.last_model_path, weights_only=True)
    return {"trainer": trainer, "model": model, "validate": validated, "predictions": predictions,
            "files": sorted(os.listdir(os.path.join(root, "weights"))),
            "weights_only_keys": sorted(k for k in ("optimizer_states", "lr_schedulers", "state_dict") if k in saved),
            "lr": trainer.optimizers[0].param_groups[0]["lr"]}
