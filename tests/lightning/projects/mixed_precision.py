"""A regressor trained in bf16 mixed precision on the CPU, with gradient clipping by value and a hook that
reads the gradient norm before each optimizer step."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 1))
        self.grad_norms = []
        self.step_dtypes = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        pred = self.net(x)
        self.step_dtypes.append(str(pred.dtype))
        loss = F.mse_loss(pred.float(), y)
        self.log("loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norm = torch.norm(torch.stack([p.grad.norm() for p in self.parameters() if p.grad is not None]))
        self.grad_norms.append(norm.item())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def main(root, callbacks):
    L.seed_everything(9)
    x = torch.randn(64, 8)
    y = torch.sin(x).sum(dim=1, keepdim=True)
    model = Regressor()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, precision="bf16-mixed", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=root, callbacks=callbacks, gradient_clip_val=0.1,
                        gradient_clip_algorithm="value")
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=16))
    return {"trainer": trainer, "model": model, "grad_norms": model.grad_norms,
            "dtypes": sorted(set(model.step_dtypes))}
