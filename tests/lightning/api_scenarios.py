"""Lightning-style code run unchanged on Lightning and on ember (``L`` is ``lightning`` or ``ember.lightning``).

Each scenario returns a JSON-able record of what happened: the hook and override calls in order with their
arguments' shapes, ``global_step`` and the final weights. ``record_lightning_api.py`` writes Lightning's records
to ``lightning_api.json``; ``tests/test_lightning_api.py`` runs the same scenarios on ember and compares. Only
torch is imported here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

TRAINER_ARGS = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
                "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def _data(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=4)


def _shape(value: Any) -> Any:
    """A short, framework-neutral description of a hook argument."""
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}"
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    if isinstance(value, torch.optim.Optimizer) or hasattr(value, "param_groups"):
        return type(getattr(value, "optimizer", value)).__name__
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return type(value).__name__


def _weights(module: torch.nn.Module) -> list[float]:
    return [round(float(v), 6) for p in module.parameters() for v in p.detach().flatten()]


def overrides(L: Any) -> dict[str, Any]:
    """Automatic optimization with every override Lightning calls, a callback whose methods take odd names, and
    steps without ``batch_idx``; 2 epochs of 3 batches, ``accumulate_grad_batches=2``, clipping at 0.5."""
    calls: list[list[Any]] = []

    class Recorder(L.Callback):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def setup(self, trainer, pl_module, stage):
            calls.append([f"{self.tag}.setup", stage])

        def on_train_batch_end(self, trainer, module, out, batch, idx):
            calls.append([f"{self.tag}.on_train_batch_end", _shape(out), idx, trainer.global_step])

        def on_train_epoch_end(self, _, __):
            calls.append([f"{self.tag}.on_train_epoch_end"])
            super().on_train_epoch_end(_, __)

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            calls.append([f"{self.tag}.on_validation_batch_end", _shape(outputs), batch_idx, dataloader_idx])

        def on_before_optimizer_step(self, trainer, pl_module, opt):
            calls.append([f"{self.tag}.on_before_optimizer_step", _shape(opt)])

        def on_before_zero_grad(self, trainer, pl_module, opt):
            calls.append([f"{self.tag}.on_before_zero_grad", _shape(opt)])

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def configure_model(self):
            calls.append(["configure_model"])

        def configure_callbacks(self):
            return [Recorder("module-cb")]

        def training_step(self, batch):
            calls.append(["training_step"])
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                       "interval": "step"}}

        def on_before_batch_transfer(self, batch, dataloader_idx):
            calls.append(["on_before_batch_transfer", dataloader_idx])
            return batch

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            calls.append(["transfer_batch_to_device", device.type, dataloader_idx])
            return super().transfer_batch_to_device(batch, device, dataloader_idx)

        def on_after_batch_transfer(self, b, i):
            calls.append(["on_after_batch_transfer", i])
            return b

        def on_train_batch_start(self, b, i):
            calls.append(["on_train_batch_start", i])

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            calls.append(["optimizer_step", epoch, batch_idx, _shape(optimizer), callable(optimizer_closure)])
            optimizer.step(closure=optimizer_closure)

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            calls.append(["optimizer_zero_grad", epoch, batch_idx, _shape(optimizer)])
            optimizer.zero_grad()

        def backward(self, loss, *args, **kwargs):
            calls.append(["backward", _shape(loss)])
            loss.backward(*args, **kwargs)

        def on_before_backward(self, loss):
            calls.append(["on_before_backward", _shape(loss)])

        def on_after_backward(self):
            calls.append(["on_after_backward"])

        def on_before_optimizer_step(self, optimizer):
            calls.append(["on_before_optimizer_step", _shape(optimizer)])

        def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):
            algo = None if gradient_clip_algorithm is None else str(gradient_clip_algorithm.value
                                                                   if hasattr(gradient_clip_algorithm, "value")
                                                                   else gradient_clip_algorithm)
            calls.append(["configure_gradient_clipping", _shape(optimizer), gradient_clip_val, algo])
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                                gradient_clip_algorithm=gradient_clip_algorithm)

        def lr_scheduler_step(self, scheduler, metric):
            calls.append(["lr_scheduler_step", type(scheduler).__name__, metric])
            scheduler.step()

        def on_train_epoch_end(self):
            super().on_train_epoch_end()
            calls.append(["on_train_epoch_end", self.current_epoch])

    torch.manual_seed(0)
    model = Model()
    trainer = L.Trainer(max_epochs=2, accumulate_grad_batches=2, gradient_clip_val=0.5, limit_val_batches=1,
                        callbacks=[Recorder("trainer-cb")], **TRAINER_ARGS)
    trainer.fit(model, _data(12, 1), _data(4, 2))
    return {"calls": calls, "global_step": trainer.global_step, "weights": _weights(model),
            "lr": model.optimizers().param_groups[0]["lr"]}


def manual(L: Any) -> dict[str, Any]:
    """Manual optimization of two optimizers with ``toggled_optimizer``/``toggle_optimizer``,
    ``manual_backward(loss, retain_graph=True)`` twice on one graph and ``clip_gradients``."""
    seen: list[list[Any]] = []

    class GAN(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            opt_a, opt_b = self.optimizers()
            x, y = batch
            with self.toggled_optimizer(opt_a):
                seen.append(["toggled", [p.requires_grad for p in self.parameters()]])
                loss = torch.nn.functional.mse_loss(self.b(self.a(x)), y)
                opt_a.zero_grad()
                self.manual_backward(loss, retain_graph=True)
                self.manual_backward(loss)
                self.clip_gradients(opt_a, gradient_clip_val=0.1, gradient_clip_algorithm="value")
                opt_a.step()
            seen.append(["untoggled", [p.requires_grad for p in self.parameters()]])
            self.toggle_optimizer(opt_b)
            loss = torch.nn.functional.mse_loss(self.b(self.a(x)), y)
            opt_b.zero_grad()
            self.manual_backward(loss)
            opt_b.step()
            seen.append(["toggle_b", [p.requires_grad for p in self.parameters()], self.a.weight.grad is None])
            self.untoggle_optimizer(opt_b)

        def configure_optimizers(self):
            return [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)]

    torch.manual_seed(0)
    model = GAN()
    trainer = L.Trainer(max_epochs=1, **TRAINER_ARGS)
    trainer.fit(model, _data(8, 3))
    return {"seen": seen, "global_step": trainer.global_step, "weights": _weights(model)}


def datamodule_and_predict(L: Any) -> dict[str, Any]:
    """A LightningDataModule's hooks and hparams, and the default ``predict_step`` (forward on the batch)."""
    calls: list[list[Any]] = []

    class Data(L.LightningDataModule):
        def __init__(self, batch_size: int = 4, tag: str = "x") -> None:
            super().__init__()
            self.save_hyperparameters(ignore="tag")

        def prepare_data(self):
            calls.append(["dm.prepare_data"])

        def setup(self, stage):
            calls.append(["dm.setup", stage])

        def teardown(self, stage):
            calls.append(["dm.teardown", stage])

        def train_dataloader(self):
            return _data(8, 4)

        def predict_dataloader(self):
            return DataLoader(_data(8, 5).dataset.tensors[0], batch_size=self.hparams.batch_size)

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.net(x)

        def setup(self, stage):
            calls.append(["module.setup", stage])

        def teardown(self, stage):
            calls.append(["module.teardown", stage])

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    model, data = Model(), Data()
    trainer = L.Trainer(max_epochs=1, **TRAINER_ARGS)
    trainer.fit(model, datamodule=data)
    predictions = trainer.predict(model, datamodule=data)
    return {"calls": calls, "hparams": dict(data.hparams),
            "predictions": [round(float(v), 6) for p in predictions for v in p.flatten()]}


SCENARIOS = {"overrides": overrides, "manual": manual, "datamodule_and_predict": datamodule_and_predict}
