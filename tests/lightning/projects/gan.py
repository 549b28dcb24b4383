"""A small GAN trained with manual optimization: two optimizers, toggled in turn."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = 4, data_dim: int = 6, lr: float = 2e-3, b1: float = 0.5):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent_dim, 16), nn.ReLU(), nn.Linear(16, data_dim))
        self.discriminator = nn.Sequential(nn.Linear(data_dim, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        self.validation_z = torch.randn(8, latent_dim)

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        return F.binary_cross_entropy_with_logits(y_hat, y)

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], self.hparams.latent_dim).type_as(real)

        self.toggle_optimizer(opt_g)
        fake = self(z)
        valid = torch.ones(real.size(0), 1).type_as(real)
        g_loss = self.adversarial_loss(self.discriminator(fake), valid)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = self.adversarial_loss(self.discriminator(real), valid)
        fake_loss = self.adversarial_loss(self.discriminator(fake.detach()), torch.zeros_like(valid))
        d_loss = (real_loss + fake_loss) / 2
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        (real,) = batch
        self.log("val_real_score", torch.sigmoid(self.discriminator(real)).mean())

    def on_validation_epoch_end(self):
        z = self.validation_z.type_as(self.generator[0].weight)
        self.log("sample_mean", self(z).mean())

    def configure_optimizers(self):
        lr, b1 = self.hparams.lr, self.hparams.b1
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, 0.999))
        return [opt_g, opt_d], []


def main(root, callbacks):
    L.seed_everything(7, verbose=False)
    real = torch.randn(48, 6) * 0.5 + 1.0
    model = GAN()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                        callbacks=callbacks, limit_val_batches=2)
    trainer.fit(model, DataLoader(TensorDataset(real), batch_size=12), DataLoader(TensorDataset(real), batch_size=12))
    return {"trainer": trainer, "model": model, "hparams": dict(model.hparams),
            "validate": trainer.validate(model, DataLoader(TensorDataset(real), batch_size=16), verbose=False)}
