"""Fine-tuning a pretrained backbone passed to the module: the backbone frozen for the first epoch and unfrozen
by hand, a one-cycle schedule stepped per batch, a CSV logger with a learning-rate monitor, checkpoints named by
a template, and the best checkpoint loaded back with load_from_checkpoint."""

import csv
import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class PairsDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 10):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(8)
        x = torch.randn(50, 6, generator=g)
        y = (x[:, :3].sum(dim=1) > x[:, 3:].sum(dim=1)).long()
        self.train_set = TensorDataset(x[:40], y[:40])
        self.val_set = TensorDataset(x[40:], y[40:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class FineTuner(L.LightningModule):
    def __init__(self, backbone: nn.Module, num_classes: int = 2, lr: float = 0.05, unfreeze_at: int = 1):
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x))

    def on_fit_start(self):
        for p in self.backbone.parameters():
            p.requires_grad = False

    def on_train_epoch_start(self):
        if self.current_epoch == self.hparams.unfreeze_at:
            for p in self.backbone.parameters():
                p.requires_grad = True

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, logger=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, nesterov=True)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr,
                                                        total_steps=self.trainer.estimated_stepping_batches)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


class LossHistory(L.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"].item())


def pretrained_backbone():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU())


def main(root, callbacks):
    L.seed_everything(21, workers=True)
    dm = PairsDataModule()
    model = FineTuner(pretrained_backbone())
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), filename="ft-{epoch:02d}-{val_acc:.2f}",
                                 monitor="val_loss", save_top_k=2, auto_insert_metric_name=False)
    history = LossHistory()
    logger = CSVLogger(save_dir=root, name="finetune")
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=logger, log_every_n_steps=2,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                        deterministic=True, callbacks=[checkpoint, LearningRateMonitor("step"), history, *callbacks])
    trainer.fit(model, datamodule=dm)
    validated = trainer.validate(datamodule=dm, verbose=False)
    best = FineTuner.load_from_checkpoint(checkpoint.best_model_path, backbone=pretrained_backbone())
    logger.finalize("success")
    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return {"trainer": trainer, "model": model, "validate": validated, "losses": history.losses,
            "best_file": os.path.basename(checkpoint.best_model_path),
            "kept": sorted(os.path.basename(p) for p in checkpoint.best_k_models),
            "best_weights": best.state_dict(), "best_hparams": dict(best.hparams),
            "log_dir": os.path.relpath(logger.log_dir, root), "version": logger.version,
            "csv_columns": sorted(rows[0]),
            "lr_logged": [float(r["lr-SGD"]) for r in rows if r.get("lr-SGD")]}
