"""``ember.log``/``ember.log_dict``: a plain ``nn.Module`` logs as an ``ember.Module`` does with ``self.log``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

import ember
from ember.testing import tiny_loaders

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False}


class MemoryLogger:
    role = "logger"
    identity = "logger.memory"

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, float]]] = []

    @ember.hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        self.records.append((step, {k: float(v) for k, v in metrics.items()}))


class Plain(nn.Module):
    """No ember base class: logs through ember.log."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        ember.log("train_loss", loss, prog_bar=True)
        ember.log("step_tag", float(batch_idx), on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        ember.log_dict({"val_loss": nn.functional.cross_entropy(logits, y),
                        "val_acc": (logits.argmax(-1) == y).float().mean()})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_plain_module_logs_into_callback_metrics_and_the_logger() -> None:
    logger = MemoryLogger()
    trainer = ember.Trainer(**QUIET, max_epochs=2, logger=logger, log_every_n_steps=1, num_sanity_val_steps=0)
    trainer.fit(Plain(), *tiny_loaders(n=16, batch_size=8))
    assert {"train_loss", "step_tag", "val_loss", "val_acc"} <= set(trainer.callback_metrics)
    assert "train_loss" in trainer.progress_bar_metrics and "val_acc" not in trainer.progress_bar_metrics
    steps = [(step, m["step_tag"]) for step, m in logger.records if "step_tag" in m]
    assert steps == [(1, 0.0), (2, 1.0), (3, 0.0), (4, 1.0)]  # per step, as self.log in training_step
    epochs = [m for _, m in logger.records if "val_acc" in m]
    assert len(epochs) == 2 and all(0.0 <= m["val_acc"] <= 1.0 for m in epochs)  # once per validation run
    assert epochs[-1]["val_loss"] == pytest.approx(float(trainer.callback_metrics["val_loss"]))


def test_same_values_as_self_log() -> None:
    class Based(ember.Module, Plain):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self.net(x)
            self.log_dict({"val_loss": nn.functional.cross_entropy(logits, y),
                           "val_acc": (logits.argmax(-1) == y).float().mean()})

    results = []
    for cls in (Plain, Based):
        torch.manual_seed(0)
        trainer = ember.Trainer(**QUIET, max_epochs=1, logger=False, num_sanity_val_steps=0)
        trainer.fit(cls(), *tiny_loaders(n=16, batch_size=8))
        results.append({k: float(v) for k, v in trainer.callback_metrics.items() if k != "step_tag"})
    assert results[0] == results[1]


def test_a_hook_of_a_callback_logs_too() -> None:
    class Counter:
        def on_train_epoch_end(self, trainer: Any) -> None:
            ember.log("epochs_seen", float(trainer.current_epoch + 1))

    trainer = ember.Trainer(**QUIET, max_epochs=2, logger=False, callbacks=[Counter()], limit_val_batches=0)
    trainer.fit(Plain(), tiny_loaders(n=16, batch_size=8)[0])
    assert float(trainer.callback_metrics["epochs_seen"]) == 2.0


@pytest.mark.parametrize("call", [lambda: ember.log("loss", 1.0), lambda: ember.log_dict({"loss": 1.0})])
def test_outside_a_running_trainer_is_a_clear_error(call: Any) -> None:
    with pytest.raises(RuntimeError, match=r"ember\.log(_dict)?\(.*'loss'.*\) was called outside a running trainer"):
        call()


def test_after_a_run_the_trainer_is_no_longer_bound() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1, logger=False, limit_val_batches=0)
    trainer.fit(Plain(), tiny_loaders(n=8, batch_size=8)[0])
    with pytest.raises(RuntimeError, match="outside a running trainer"):
        ember.log("late", 1.0)


def test_another_thread_has_no_running_trainer() -> None:
    errors: list[BaseException] = []

    class Step(Plain):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            def other() -> None:
                try:
                    ember.log("from_thread", 1.0)
                except RuntimeError as exc:
                    errors.append(exc)

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
            return super().training_step(batch, batch_idx)

    trainer = ember.Trainer(**QUIET, max_epochs=1, logger=False, limit_val_batches=0, max_steps=1)
    trainer.fit(Step(), tiny_loaders(n=8, batch_size=8)[0])
    assert len(errors) == 1 and "from_thread" not in trainer.callback_metrics
