"""A classifier that logs torchmetrics objects, averages validation outputs kept in a list, and predicts with
the default predict_step."""

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, in_features: int = 5, num_classes: int = 3, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(in_features, 12), nn.ReLU(), nn.Linear(12, num_classes))
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=num_classes)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.validation_step_outputs = []
        self.example_input_array = torch.zeros(2, in_features)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("train_loss", loss, prog_bar=True, batch_size=x.size(0))
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.val_acc.update(logits.argmax(dim=1), y)
        self.log("val_acc", self.val_acc, on_epoch=True)
        self.validation_step_outputs.append(loss)
        return loss

    def on_validation_epoch_end(self):
        avg = torch.stack(self.validation_step_outputs).mean()
        self.log("val_loss", avg, sync_dist=True)
        self.validation_step_outputs.clear()

    def on_train_epoch_start(self):
        self.log("lr", self.lr_schedulers().get_last_lr()[0], on_step=False, on_epoch=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_acc(self(x), y)
        self.log("test_acc", self.test_acc)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


def main(root, callbacks):
    L.seed_everything(5)
    x = torch.randn(60, 5)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    train = DataLoader(TensorDataset(x[:40], y[:40]), batch_size=8)
    val = DataLoader(TensorDataset(x[40:], y[40:]), batch_size=10)
    model = Classifier()
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                        callbacks=callbacks)
    trainer.fit(model, train, val)
    fitted_metrics = sorted(trainer.callback_metrics)
    tested = trainer.test(model, val, verbose=False)
    predictions = trainer.predict(model, DataLoader(x[40:], batch_size=7))
    return {"trainer": trainer, "model": model, "fitted_metrics": fitted_metrics, "test": tested,
            "predictions": predictions, "pending_outputs": len(model.validation_step_outputs)}
