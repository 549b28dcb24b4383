"""A module that owns its optimizer step: a linear warmup in optimizer_step, gradient clipping only after the
first epoch, a scheduler stepped by hand, and the schedule sized from estimated_stepping_batches."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class WarmupRegressor(pl.LightningModule):
    def __init__(self, lr: float = 0.05, warmup_steps: int = 3):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
        self.lr_seen = []
        self.scheduler_steps = []
        self.clipped_at = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.model(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        total = self.trainer.estimated_stepping_batches
        self.total_steps = total
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        step = self.trainer.global_step
        if step < self.hparams.warmup_steps:
            scale = float(step + 1) / self.hparams.warmup_steps
            for group in optimizer.param_groups:
                group["lr"] = scale * self.hparams.lr
        self.lr_seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.current_epoch > 0:
            self.clipped_at.append(self.global_step)
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                                gradient_clip_algorithm=gradient_clip_algorithm)

    def lr_scheduler_step(self, scheduler, metric):
        self.scheduler_steps.append(self.global_step)
        if self.global_step >= self.hparams.warmup_steps:
            scheduler.step()


def main(root, callbacks):
    pl.seed_everything(3)
    x = torch.randn(40, 4)
    y = x.sum(dim=1, keepdim=True) ** 2 / 4
    model = WarmupRegressor()
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                         callbacks=callbacks, gradient_clip_val=0.3, accumulate_grad_batches=2)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=6))
    return {"trainer": trainer, "model": model, "total_steps": model.total_steps, "lr_seen": model.lr_seen,
            "scheduler_steps": model.scheduler_steps, "clipped_at": model.clipped_at,
            "final_lr": trainer.optimizers[0].param_groups[0]["lr"]}
