"""Records edge cases of Lightning's training loop for tests/test_lightning_compat_loop_edges.py: learning-rate
schedulers in an epoch that ``-1`` from ``on_train_batch_start`` ends, and the training bar's length when only
``max_steps`` bounds a fit (a loader with and without a length).

The scenarios take the framework's ``pytorch`` module, so that the test runs the very same code on
``ember.lightning.pytorch``. Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_loop_edges.py tests/lightning/loop_edges.json
"""

from __future__ import annotations

import itertools
import pathlib
import sys
import tempfile
from typing import Any

import torch


def scenarios(pl: Any) -> dict[str, Any]:
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self, interval: str = "epoch", skip_at: int | None = None) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.interval, self.skip_at = interval, skip_at
            self.totals: list[Any] = []

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
            return -1 if batch_idx == self.skip_at else None

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 0 and self.trainer.progress_bar_callback is not None:
                self.totals.append(self.trainer.progress_bar_callback.train_progress_bar.total)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.interval}}

    def data(n: int) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=1)

    def trainer(**kwargs: Any) -> Any:
        return pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
                          num_sanity_val_steps=0, **kwargs)

    out: dict[str, Any] = {}
    for interval, skip_at in itertools.product(["step", "epoch"], [0, 2, None]):
        model = Model(interval, skip_at)
        t = trainer(max_epochs=2, limit_train_batches=5, enable_progress_bar=False)
        t.fit(model, data(8))
        out[f"lr {interval} skip {skip_at}"] = {"lr": t.optimizers[0].param_groups[0]["lr"],
                                                "global_step": t.global_step}
    for steps in (3, 7):
        model = Model()
        t = trainer(max_epochs=-1, max_steps=steps)
        t.fit(model, data(5))
        out[f"bar total, 5 batches, max_steps {steps}"] = model.totals
        model = Model()
        t = trainer(max_epochs=-1, max_steps=steps)
        t.fit(model, (batch for batch in itertools.repeat([torch.randn(1, 4)])))  # no length
        out[f"bar total, no length, max_steps {steps}"] = model.totals
    for logger in ("default", "csv given"):
        root = tempfile.mkdtemp()
        given = {} if logger == "default" else {"logger": pl.loggers.CSVLogger(root)}
        model = Model()
        t = pl.Trainer(accelerator="cpu", default_root_dir=root, fast_dev_run=2, enable_progress_bar=False,
                       enable_model_summary=False, **given)
        t.fit(model, data(5))
        model.logger.experiment.add_histogram("w", torch.zeros(3))  # goes nowhere
        out[f"fast_dev_run, logger {logger}"] = {"logger": type(t.logger).__name__, "loggers": len(t.loggers),
                                                 "files": sorted(str(p.relative_to(root)) for p in
                                                                 pathlib.Path(root).rglob("*"))}
    out["metrics at on_validation_epoch_end"] = _metrics_at_validation_end(pl, data)
    out["published metrics at each hook"] = _published_at_hooks(pl, data)
    out["per-step plateau scheduler after the batch's validation"] = _plateau_step_order(pl, data)
    return out


def _logging_model(pl: Any) -> type:
    """A module whose training step logs ``t`` per step and per epoch."""

    class LoggingModel(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("t", float(batch_idx), on_step=True, on_epoch=True)
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return LoggingModel


def _published_at_hooks(pl: Any, data: Any) -> list[Any]:
    """``callback_metrics`` (names and values), ``logged_metrics`` and ``progress_bar_metrics`` (names) at the
    batch and epoch hooks of a fit whose training and validation log a value per step and per epoch."""
    seen: list[Any] = []

    class Model(_logging_model(pl)):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("v", float(batch_idx), on_step=True, on_epoch=True, prog_bar=True)

        def _seen(self, hook: str) -> None:
            t = self.trainer
            seen.append([hook, {k: float(v) for k, v in sorted(t.callback_metrics.items())},
                         sorted(t.logged_metrics), sorted(t.progress_bar_metrics)])

        def on_train_batch_end(self, *args: Any) -> None:
            self._seen("on_train_batch_end")

        def on_validation_batch_end(self, *args: Any) -> None:
            self._seen("on_validation_batch_end")

        def on_validation_epoch_end(self) -> None:
            self._seen("on_validation_epoch_end")

        def on_train_epoch_end(self) -> None:
            self._seen("on_train_epoch_end")

    t = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
                   enable_progress_bar=False, max_epochs=1, limit_train_batches=2, limit_val_batches=2,
                   num_sanity_val_steps=0)
    t.fit(Model(), data(4), data(4))
    return seen


def _metrics_at_validation_end(pl: Any, data: Any) -> list[Any]:
    """What ``trainer.logged_metrics`` holds and the reduced value of a name logged in ``validation_step``, read
    in ``on_validation_epoch_end`` (the sanity check's included), and what ``validate()`` returns."""
    seen: list[Any] = []

    class Model(_logging_model(pl)):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("v", float(batch_idx + 1))

        def on_validation_epoch_end(self) -> None:
            metrics = self.trainer.callback_metrics
            seen.append([self.trainer.sanity_checking, sorted(self.trainer.logged_metrics),
                         float(metrics["v"]) if "v" in metrics else None])
            self.log("after", 2.0)

    t = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
                   enable_progress_bar=False, max_epochs=1, limit_train_batches=2, limit_val_batches=3,
                   num_sanity_val_steps=1)
    model = Model()
    t.fit(model, data(4), data(4))
    returned = t.validate(model, data(4))
    return [seen, returned]


def _plateau_step_order(pl: Any, data: Any) -> list[Any]:
    """When a ReduceLROnPlateau scheduler with ``'interval': 'step'`` (every second batch) and a StepLR one step,
    next to the batch hooks and a validation within the epoch (``val_check_interval=2``), and the metric the
    plateau one is given (logged by the validation that ran after the same batch)."""
    events: list[Any] = []

    class Plateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
        def step(self, metrics: Any, *args: Any) -> None:
            events.append(["plateau step", round(float(metrics), 4)])
            super().step(metrics, *args)

    class Step(torch.optim.lr_scheduler.StepLR):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.ready = True  # its first step() is the constructor's

        def step(self, *args: Any) -> None:
            if getattr(self, "ready", False):
                events.append(["steplr step"])
            super().step(*args)

    class Model(_logging_model(pl)):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            events.append(["on_train_batch_end", batch_idx])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("v", float(self.trainer.global_step))

        def on_validation_end(self) -> None:
            events.append(["on_validation_end"])

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=1.0)
            return [opt], [{"scheduler": Plateau(opt), "interval": "step", "frequency": 2, "monitor": "v"},
                           {"scheduler": Step(opt, 1), "interval": "step"}]

    t = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
                   enable_progress_bar=False, max_epochs=1, limit_train_batches=4, limit_val_batches=1,
                   val_check_interval=2, num_sanity_val_steps=0)
    t.fit(Model(), data(4), data(2))
    return events


if __name__ == "__main__":
    from recorded import record_on_lightning  # (run as a script, this folder is on the path)

    record_on_lightning(scenarios, sys.argv[1])  # to a file, not stdout: the progress bars draw there
