"""self.log with torchmetrics Metric objects, Trainer.log for plugins, and the step/epoch keys."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

torchmetrics = pytest.importorskip("torchmetrics")

QUIET = {"accelerator": "cpu",
         "enable_progress_bar": False, "enable_model_summary": False, "logger": False, "num_sanity_val_steps": 0}


class MetricModel(TinyClassifier):
    """Logs accuracy as a torchmetrics object and remembers every prediction, to check the logged values."""

    def __init__(self) -> None:
        super().__init__()
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="micro")
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="micro")
        self.seen: dict[str, list] = {"train": [], "val": []}
        self.step_values: list[tuple[float, float]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        preds = logits.argmax(1)
        self.train_acc(preds, y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        self.seen["train"].append((preds == y).float())
        return torch.nn.functional.cross_entropy(logits, y)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        x, y = batch
        self.step_values.append((float(self.trainer.callback_metrics["train_acc_step"]),
                                 float(self.seen["train"][-1].mean())))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        preds = self(x).argmax(1)
        self.val_acc.update(preds, y)  # update only: the epoch value is compute() over every batch
        self.log("val_acc", self.val_acc)
        self.seen["val"].append((preds == y).float())


def uneven_loaders() -> tuple[DataLoader, DataLoader]:
    ds = tiny_dataset(n=70)  # batches of 16, 16, 16, 16, 6: a mean of batch means would be wrong
    return DataLoader(ds, batch_size=16), DataLoader(ds, batch_size=16)


def test_metric_objects_give_exact_epoch_values_and_are_reset():
    model = MetricModel()
    train, val = uneven_loaders()
    trainer = ember.Trainer(max_epochs=2, **QUIET)
    trainer.fit(model, train, val)
    # step values: the metric's forward() result for that batch
    assert all(logged == pytest.approx(expected) for logged, expected in model.step_values)
    # epoch value: accuracy over all samples of the last epoch, not the running value over both epochs
    last_train = torch.cat(model.seen["train"][-5:])
    assert float(trainer.callback_metrics["train_acc_epoch"]) == pytest.approx(float(last_train.mean()))
    last_val = torch.cat(model.seen["val"][-5:])
    assert float(trainer.callback_metrics["val_acc"]) == pytest.approx(float(last_val.mean()))
    # reset after each epoch: a fresh validate() sees only its own batches
    model.seen["val"].clear()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    (result,) = trainer.validate(model, val, verbose=False)
    assert result["val_acc"] == pytest.approx(float(torch.cat(model.seen["val"]).mean()))
    assert model.val_acc.update_count == 0  # computed, then reset


def test_metric_logged_in_an_epoch_hook_is_computed_once():
    class EpochEnd(MetricModel):
        def validation_step(self, batch, batch_idx):
            x, y = batch
            preds = self(x).argmax(1)
            self.val_acc.update(preds, y)
            self.seen["val"].append((preds == y).float())

        def on_validation_epoch_end(self):
            self.log("val_acc", self.val_acc)

    model = EpochEnd()
    train, val = uneven_loaders()
    (result,) = ember.Trainer(**QUIET).validate(model, val, verbose=False)
    assert result["val_acc"] == pytest.approx(float(torch.cat(model.seen["val"]).mean()))


def test_a_metric_that_is_not_a_scalar_is_refused():
    class PerClass(TinyClassifier):
        def __init__(self):
            super().__init__()
            self.acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average=None)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.acc.update(self(x).argmax(1), y)
            self.log("acc", self.acc)

    _, val = uneven_loaders()
    with pytest.raises(ValueError, match=r"shape \(3,\).*single number"):
        ember.Trainer(**QUIET).validate(PerClass(), val, verbose=False)


def test_plugins_log_through_the_trainer():
    class Counter:
        def on_train_batch_end(self, trainer, batch_idx):
            trainer.log("seen", float(batch_idx), reduce_fx="max", on_epoch=True, prog_bar=True)

    train, val = uneven_loaders()
    trainer = ember.Trainer(max_epochs=1, callbacks=[Counter()], **QUIET)
    trainer.fit(TinyClassifier(), train, val)
    assert float(trainer.callback_metrics["seen_step"]) == 4.0
    assert float(trainer.callback_metrics["seen_epoch"]) == 4.0
    assert trainer.progress_bar_metrics["seen_epoch"] == 4.0


def test_log_dict_and_batch_size_weighting():
    class Weighted(TinyClassifier):
        def validation_step(self, batch, batch_idx):
            x, _ = batch
            # value = batch index, weight = batch size given explicitly
            self.log_dict({"a": float(batch_idx), "b": float(batch_idx)}, batch_size=10 if batch_idx == 0 else 1)

    _, val = uneven_loaders()
    (result,) = ember.Trainer(**QUIET).validate(Weighted(), val, verbose=False)
    expected = (0 * 10 + 1 + 2 + 3 + 4) / 14
    assert result == {"a": pytest.approx(expected), "b": pytest.approx(expected)}
