"""Recording subclasses of Lightning's Precision, Accelerator and Strategy classes, run through a tiny CPU fit.

The same code runs on Lightning (tests/lightning/record_seed_classes.py writes seed_classes.json) and on ember
(tests/test_lightning_seed.py), given the package whose names it uses: ``lightning.pytorch`` or
``ember.lightning.pytorch``. Each recorder logs a method when it is entered, except ``optimizer_step``, logged
when it returns: Lightning runs the training step and the backward pass inside it (the closure), ember before
it, so the point both share is the step itself.
"""

from __future__ import annotations

import importlib
from typing import Any


def _names(package: str) -> Any:
    pl = importlib.import_module(package)
    precision = importlib.import_module(f"{package}.plugins.precision")
    accelerators = importlib.import_module(f"{package}.accelerators")
    strategies = importlib.import_module(f"{package}.strategies")
    return pl, precision, accelerators, strategies


def _recorders(package: str, calls: list) -> dict[str, Any]:
    import torch

    pl, precision, accelerators, strategies = _names(package)

    def precision_recorder(base: type) -> type:
        class Recorder(base):  # type: ignore[misc, valid-type]
            def convert_input(self, data: Any) -> Any:
                calls.append(["convert_input", type(data).__name__])
                return super().convert_input(data)

            def train_step_context(self) -> Any:
                calls.append(["train_step_context"])
                return super().train_step_context()

            def pre_backward(self, tensor: Any, module: Any) -> Any:
                calls.append(["pre_backward", str(tensor.dtype)])
                return super().pre_backward(tensor, module)

            def backward(self, tensor: Any, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
                calls.append(["backward", type(optimizer).__name__])
                super().backward(tensor, model, optimizer, *args, **kwargs)

            def post_backward(self, tensor: Any, module: Any) -> Any:
                calls.append(["post_backward"])
                return super().post_backward(tensor, module)

            def clip_gradients(self, optimizer: Any, clip_val: Any = 0.0, gradient_clip_algorithm: Any = "norm") -> None:
                calls.append(["clip_gradients", float(clip_val), str(getattr(gradient_clip_algorithm, "value",
                                                                            gradient_clip_algorithm))])
                super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)

            def optimizer_step(self, optimizer: Any, model: Any, closure: Any, **kwargs: Any) -> Any:
                out = super().optimizer_step(optimizer, model, closure, **kwargs)
                calls.append(["optimizer_step", type(optimizer).__name__])
                return out

        return Recorder

    class Accelerator(accelerators.CPUAccelerator):  # type: ignore[misc, name-defined]
        def setup_device(self, device: Any) -> None:
            calls.append(["accelerator.setup_device", str(device)])
            super().setup_device(device)

        def teardown(self) -> None:
            calls.append(["accelerator.teardown"])
            super().teardown()

    class Strategy(strategies.SingleDeviceStrategy):  # type: ignore[misc, name-defined]
        def batch_to_device(self, batch: Any, device: Any = None, dataloader_idx: int = 0) -> Any:
            calls.append(["strategy.batch_to_device", str(device), dataloader_idx])
            return super().batch_to_device(batch, device, dataloader_idx)

        def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
            calls.append(["strategy.reduce_boolean_decision", bool(decision), all])
            return super().reduce_boolean_decision(decision, all)

        def barrier(self, name: Any = None) -> None:
            calls.append(["strategy.barrier"])
            super().barrier(name)

    class FullPrecision(precision_recorder(precision.Precision)):  # type: ignore[misc]
        def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
            calls.append(["connect", type(model).__name__, len(optimizers), len(lr_schedulers)])
            return super().connect(model, optimizers, lr_schedulers)

        def state_dict(self) -> Any:
            calls.append(["state_dict"])
            return super().state_dict()

    class FullAccelerator(Accelerator):
        def get_device_stats(self, device: Any) -> Any:
            calls.append(["accelerator.get_device_stats", str(device)])
            return {"recorded": 1.0}

        @staticmethod
        def is_available() -> bool:
            calls.append(["accelerator.is_available"])
            return True

    class FullStrategy(Strategy):
        def connect(self, model: Any) -> None:
            calls.append(["strategy.connect", type(model).__name__])
            super().connect(model)

        def all_gather(self, tensor: Any, group: Any = None, sync_grads: bool = False) -> Any:
            calls.append(["strategy.all_gather", list(tensor.shape), sync_grads])
            return super().all_gather(tensor, group, sync_grads)

        def broadcast(self, obj: Any, src: int = 0) -> Any:
            calls.append(["strategy.broadcast", type(obj).__name__, src])
            return super().broadcast(obj, src)

        def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
            calls.append(["strategy.reduce", str(reduce_op)])
            return super().reduce(tensor, group, reduce_op)

        def model_sharded_context(self) -> Any:
            calls.append(["strategy.model_sharded_context"])
            return super().model_sharded_context()

        def save_checkpoint(self, checkpoint: Any, filepath: Any, storage_options: Any = None) -> None:
            calls.append(["strategy.save_checkpoint", sorted(k for k in ("state_dict", "optimizer_states", "epoch",
                                                                         "global_step") if k in checkpoint),
                          __import__("os").path.basename(str(filepath))])
            return super().save_checkpoint(checkpoint, filepath, storage_options)

    return {"pl": pl, "torch": torch, "precision": precision_recorder(precision.Precision),
            "full_precision": FullPrecision, "full_accelerator": FullAccelerator, "full_strategy": FullStrategy,
            "mixed": precision_recorder(precision.MixedPrecision), "accelerator": Accelerator, "strategy": Strategy}


def _fit(package: str, calls: list, plugin: str, **trainer: Any) -> None:
    r = _recorders(package, calls)
    pl, torch = r["pl"], r["torch"]
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.layer(batch[0]).float().pow(2).mean()
            if plugin == "overrides":
                self.all_gather(loss.detach())
                self.log("gathered", loss.detach(), sync_dist=True)
            return loss

        def configure_model(self) -> None:
            if plugin == "overrides":
                calls.append(["configure_model"])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4)
    kwargs: dict[str, Any] = {"max_epochs": 1, "limit_val_batches": 0, "logger": False, "enable_checkpointing": False,
                              "enable_progress_bar": False, "enable_model_summary": False, **trainer}
    if plugin == "precision":
        kwargs["plugins"] = [r["precision"]()]
    elif plugin == "mixed":
        kwargs["plugins"] = [r["mixed"]("bf16-mixed", "cpu")]
    elif plugin == "accelerator_strategy":
        kwargs["accelerator"], kwargs["strategy"] = r["accelerator"](), r["strategy"]()
    elif plugin == "overrides":
        import os
        import tempfile

        loggers = importlib.import_module(f"{package}.loggers")
        callbacks = importlib.import_module(f"{package}.callbacks")
        folder = tempfile.mkdtemp()
        kwargs.update(plugins=[r["full_precision"]()], accelerator=r["full_accelerator"](),
                      strategy=r["full_strategy"](), logger=loggers.CSVLogger(folder), log_every_n_steps=1,
                      callbacks=[callbacks.DeviceStatsMonitor()])
        trainer = pl.Trainer(**kwargs)
        calls.append(["fit"])
        trainer.fit(Model(), data)
        calls.append(["save_checkpoint"])
        trainer.save_checkpoint(os.path.join(folder, "manual.ckpt"))
        return
    pl.Trainer(**kwargs).fit(Model(), data)


#: name -> (plugin under test, Trainer arguments).
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "precision": ("precision", {"gradient_clip_val": 0.5}),
    "precision_accumulate": ("precision", {"accumulate_grad_batches": 2, "gradient_clip_val": 0.5,
                                           "gradient_clip_algorithm": "value"}),
    "mixed_bf16": ("mixed", {"gradient_clip_val": 0.5}),
    "accelerator_strategy": ("accelerator_strategy", {}),
    "overrides": ("overrides", {"gradient_clip_val": 0.5}),
}


def record(package: str) -> dict[str, list]:
    """Every scenario's calls, run with ``package``'s classes."""
    out = {}
    for name, (plugin, trainer) in SCENARIOS.items():
        calls: list = []
        _fit(package, calls, plugin, **trainer)
        out[name] = calls
    return out
