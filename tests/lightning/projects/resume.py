"""A stateful callback written the way Lightning's docs show callbacks, and a fit resumed from the last
checkpoint with trainer.fit(ckpt_path=...)."""

import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class BatchCounter(Callback):
    def __init__(self):
        self.batches = 0
        self.epochs = []
        self.loaded = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, idx):
        self.batches += 1

    def on_train_epoch_end(self, trainer, module):
        self.epochs.append(trainer.current_epoch)

    def on_validation_batch_end(self, _trainer, _module, out, batch, i, dl_idx=0):
        pass

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["batch_counter_note"] = self.batches

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self.loaded = {"note": checkpoint["batch_counter_note"], "global_step": checkpoint["global_step"],
                       "keys": [k for k in ("state_dict", "optimizer_states", "lr_schedulers", "hyper_parameters")
                                if k in checkpoint]}

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state_dict):
        self.batches = state_dict["batches"]


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 2)
        self.epoch_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.layer(x), y))

    def on_train_epoch_end(self):
        self.epoch_losses.append(float(self.trainer.callback_metrics["train_loss"]))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)}


def main(root, callbacks):
    pl.seed_everything(2)
    x = torch.randn(30, 3)
    y = (x.sum(dim=1) > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=8)
    val = DataLoader(TensorDataset(x[:10], y[:10]), batch_size=5)

    def make_trainer(max_epochs):
        checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True)
        counter = BatchCounter()
        trainer = pl.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                             callbacks=[checkpoint, counter, *callbacks])
        return trainer, checkpoint, counter

    first, checkpoint, counter = make_trainer(2)
    first.fit(Net(), train, val)
    last = checkpoint.last_model_path

    model = Net()
    trainer, _, resumed_counter = make_trainer(4)
    trainer.fit(model, train, val, ckpt_path=last)
    return {"trainer": trainer, "model": model, "last_file": os.path.basename(last),
            "first_batches": counter.batches, "resumed_batches": resumed_counter.batches,
            "resumed_epochs": resumed_counter.epochs, "loaded_note": resumed_counter.loaded,
            "epoch_losses": model.epoch_losses,
            "lr": trainer.optimizers[0].param_groups[0]["lr"]}
