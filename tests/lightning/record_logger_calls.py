"""Records what Lightning hands to a logger, and when, for tests/test_lightning_compat_logstep.py: every
``log_metrics`` call (its step and its values) and every ``log_hyperparams`` call (its keys), in training with
``log_every_n_steps`` 1, 3 and 10, under gradient accumulation, with values logged per step and per epoch in
validation, a validation within the epoch (``val_check_interval``), ``validate()`` and ``test()`` on one and on
several dataloaders, values logged in epoch-end hooks, manual optimization with two optimizers, a value logged as
``"step"``, a fit that stops early, and the hyperparameters of a module and a DataModule.

The scenarios take the framework's ``pytorch`` module, so that the test runs the very same code on
``ember.lightning.pytorch``. Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_logger_calls.py tests/lightning/logger_calls.json
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import torch


def _recording_logger(pl: Any, calls: list[Any]) -> Any:
    class Recorder(pl.loggers.Logger):
        @property
        def name(self) -> str:
            return "recorder"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            calls.append(["hparams", sorted(dict(params))])

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            calls.append(["metrics", step, {k: round(float(v), 4) for k, v in sorted(metrics.items())}])

    return Recorder()


def _model(pl: Any) -> type:
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        """Training logs ``t`` (the batch index) per step and per epoch; validation and test log ``v`` (the batch
        index plus one) as ``val_on_step`` says; ``on_train_epoch_end`` logs ``e``."""

        def __init__(self, lr: float = 0.1, val_on_step: bool = False, log_step_key: bool = False) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("t", float(batch_idx), on_step=True, on_epoch=True)
            if self.hparams.log_step_key:
                self.log("step", float(100 + batch_idx))
            return self.layer(batch[0]).pow(2).mean()

        def on_train_epoch_end(self) -> None:
            self.log("e", float(self.current_epoch))

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("v", float(batch_idx + 1), on_step=self.hparams.val_on_step, on_epoch=True)

        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("x", float(batch_idx + 1), on_step=self.hparams.val_on_step, on_epoch=True)

        def on_validation_epoch_end(self) -> None:
            self.log("ve", 1.0)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

        def train_dataloader(self) -> Any:
            return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2)

        def val_dataloader(self) -> Any:
            return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2)

        def test_dataloader(self) -> Any:
            return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2)

    return Model


def _trainer(pl: Any, calls: list[Any], **kwargs: Any) -> Any:
    args: dict[str, Any] = {"accelerator": "cpu", "enable_checkpointing": False, "enable_model_summary": False,
                            "enable_progress_bar": False, "max_epochs": 2, "limit_train_batches": 7,
                            "limit_val_batches": 2, "limit_test_batches": 3, "default_root_dir": tempfile.mkdtemp()}
    args.update(kwargs)
    return pl.Trainer(logger=_recording_logger(pl, calls), **args)


def _fit(pl: Any, model_args: dict[str, Any] | None = None, **trainer_args: Any) -> list[Any]:
    calls: list[Any] = []
    _trainer(pl, calls, **trainer_args).fit(_model(pl)(**(model_args or {})))
    return calls


def _evaluate(pl: Any, several: bool) -> list[Any]:
    """``validate()`` then ``test()`` (values logged per step and per epoch), then a fit and ``validate()`` again
    on the same Trainer."""
    from torch.utils.data import DataLoader, TensorDataset

    calls: list[Any] = []
    model = _model(pl)(val_on_step=True)
    t = _trainer(pl, calls, max_epochs=1, limit_train_batches=3)

    def loaders() -> Any:
        one = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
        return [one, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)] if several else one

    t.validate(model, loaders())
    calls.append("test")
    t.test(model, loaders())
    calls.append("fit")
    t.fit(model)
    calls.append("validate")
    t.validate(model, loaders())
    return calls


def _manual(pl: Any) -> list[Any]:
    """Manual optimization, two optimizers stepped on every other batch: ``global_step`` counts both."""
    calls: list[Any] = []

    class Manual(_model(pl)):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.other = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("t", float(batch_idx))
            a, b = self.optimizers()
            loss = self.layer(batch[0]).pow(2).mean() + self.other(batch[0]).pow(2).mean()
            self.manual_backward(loss)
            if batch_idx % 2 == 0:
                a.step()
                b.step()
            a.zero_grad()
            b.zero_grad()

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.other.parameters(), lr=0.1)]

    _trainer(pl, calls, log_every_n_steps=2, limit_val_batches=0).fit(Manual())
    return calls


def _stopping(pl: Any) -> list[Any]:
    """``should_stop`` set in ``on_train_batch_end`` of the third batch, ``log_every_n_steps=10``."""
    calls: list[Any] = []

    class Stopping(_model(pl)):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 2:
                self.trainer.should_stop = True

    _trainer(pl, calls, log_every_n_steps=10, limit_val_batches=0, min_epochs=0).fit(Stopping())
    return calls


def _datamodule_hparams(pl: Any) -> dict[str, list[Any]]:
    """``log_hyperparams`` with the hyperparameters of a module, of a DataModule, of both and of neither."""

    class Data(pl.LightningDataModule):
        def __init__(self, batch: int = 2, save: bool = True) -> None:
            super().__init__()
            if save:
                self.save_hyperparameters()

        def train_dataloader(self) -> Any:
            from torch.utils.data import DataLoader, TensorDataset

            return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)

    class Plain(_model(pl)):
        def __init__(self) -> None:
            pl.LightningModule.__init__(self)
            self.layer = torch.nn.Linear(4, 1)
            self.hparams.update(lr=0.1, val_on_step=False, log_step_key=False)  # read by the steps; not saved

    out: dict[str, list[Any]] = {}
    for name, model_class, data_save in (("both", _model(pl), True), ("module", _model(pl), False),
                                         ("datamodule", Plain, True), ("neither", Plain, False)):
        calls: list[Any] = []
        _trainer(pl, calls, max_epochs=1, limit_train_batches=1, limit_val_batches=0).fit(
            model_class(), datamodule=Data(save=data_save))
        out[name] = [c for c in calls if c[0] == "hparams"]
    return out


def scenarios(pl: Any) -> dict[str, Any]:
    pl.seed_everything(0)
    out: dict[str, Any] = {}
    for every in (1, 3, 10):
        out[f"every {every}"] = _fit(pl, log_every_n_steps=every)
    for accumulate, every in ((3, 1), (2, 2)):
        out[f"accumulate {accumulate} every {every}"] = _fit(pl, accumulate_grad_batches=accumulate,
                                                             log_every_n_steps=every)
    out["validation on step"] = _fit(pl, {"val_on_step": True}, log_every_n_steps=2, limit_val_batches=3)
    out["val_check_interval 0.5"] = _fit(pl, {"val_on_step": True}, log_every_n_steps=2, limit_train_batches=8,
                                         val_check_interval=0.5)
    out["step key"] = _fit(pl, {"log_step_key": True}, log_every_n_steps=2, max_epochs=1)
    out["max_steps mid-epoch"] = _fit(pl, log_every_n_steps=2, max_steps=5)
    out["validate and test"] = _evaluate(pl, several=False)
    out["validate and test, two dataloaders"] = _evaluate(pl, several=True)
    out["manual, two optimizers"] = _manual(pl)
    out["should_stop"] = _stopping(pl)
    out["hparams"] = _datamodule_hparams(pl)
    return out


if __name__ == "__main__":
    from recorded import record_on_lightning  # (run as a script, this folder is on the path)

    record_on_lightning(scenarios, sys.argv[1])
