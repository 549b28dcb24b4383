"""The run state: ``trainer.state``, the read-only progress counters, and the logging context."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.loop.state import FitProgress, Progress, TrainerState
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False, "accelerator": "cpu"}


def loader(batches: int) -> DataLoader:
    return DataLoader(tiny_dataset(n=batches * 2), batch_size=2)


def test_state_follows_lightning_fn_stage_status() -> None:
    seen: list[tuple[Any, ...]] = []

    class Probe:
        def on_train_batch_start(self, trainer: ember.Trainer) -> None:
            seen.append((trainer.state.fn, trainer.state.stage, trainer.state.status, trainer.training))

        def on_validation_batch_start(self, trainer: ember.Trainer) -> None:
            seen.append((trainer.state.fn, trainer.state.stage, trainer.sanity_checking, trainer.validating))

    trainer = ember.Trainer(max_epochs=1, callbacks=[Probe()], num_sanity_val_steps=1, **QUIET)
    assert trainer.state.status == "initializing" and not trainer.state.finished
    trainer.fit(TinyClassifier(), loader(2), loader(1))
    # Lightning's stages: "sanity_check" during the sanity check (validating is False there), as recorded in
    # tests/lightning/loop.json
    assert seen == [("fit", "sanity_check", True, False), ("fit", "train", "running", True),
                    ("fit", "train", "running", True), ("fit", "validate", False, True)]
    assert trainer.state.finished and trainer.state.stage is None and trainer.state["fn"] == "fit"
    assert trainer.state.get("nothing", 3) == 3
    with pytest.raises(KeyError):
        trainer.state["nothing"]
    with pytest.raises(ValueError, match="trainer.state.stage='training' is not one of"):
        trainer.state.stage = "training"


def test_counters_are_read_only_except_should_stop() -> None:
    trainer = ember.Trainer(max_epochs=3, **QUIET)
    for name in ("current_epoch", "global_step", "batch_idx", "sanity_checking", "callback_metrics"):
        with pytest.raises(AttributeError):
            setattr(trainer, name, 1)

    class Stop:
        def on_train_epoch_end(self, trainer: ember.Trainer) -> None:
            trainer.should_stop = True

    trainer = ember.Trainer(max_epochs=3, callbacks=[Stop()], **QUIET)
    trainer.fit(TinyClassifier(), loader(3))
    assert (trainer.current_epoch, trainer.global_step, trainer.batch_idx) == (1, 3, 2)
    assert trainer.should_stop is True and trainer.loop.progress.should_stop is True


def test_progress_is_saved_and_restored_as_one_unit() -> None:
    progress = Progress(current_epoch=2, global_step=7, batch_idx=1, batches_seen=9, should_stop=True)
    saved = progress.snapshot(batch_idx=1)
    assert saved == FitProgress(epoch=2, global_step=7, batches_seen=9, should_stop=True, phase="batch", batch_idx=1)
    assert progress.snapshot().phase == "epoch_start" and progress.snapshot().batch_idx == -1
    fresh = Progress()
    fresh.restore(saved)
    assert (fresh.current_epoch, fresh.global_step, fresh.batches_seen, fresh.should_stop) == (2, 7, 9, True)


def test_training_log_keeps_its_name_after_validation_with_two_loaders() -> None:
    """Validation in the middle of an epoch, over two loaders, hands the logging context back as it found it:
    what training logs afterwards is not keyed by a validation dataloader."""

    class Model(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("after", float(batch_idx), on_epoch=True)
            return loss

    trainer = ember.Trainer(max_epochs=1, val_check_interval=2, num_sanity_val_steps=0, **QUIET)
    trainer.fit(Model(), loader(4), [loader(1), loader(1)])
    assert "after_epoch" in trainer.callback_metrics
    assert not any(k.startswith("after") and "dataloader_idx" in k for k in trainer.callback_metrics)
    assert "val_loss/dataloader_idx_1" in trainer.callback_metrics


def test_trainer_state_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="trainer.state.fn='train' is not one of"):
        TrainerState(fn="train")


def test_log_in_predict_is_a_clear_error_even_after_fit() -> None:
    """predict records no metrics: self.log there says so, instead of writing into the last fit's results."""

    class Model(TinyClassifier):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("p", 1.0)
            return super().predict_step(batch, batch_idx)

    trainer = ember.Trainer(max_epochs=1, **QUIET)
    model = Model()
    trainer.fit(model, loader(2))
    with pytest.raises(RuntimeError, match=r"self.log\('p'\) was called in predict, which records no metrics"):
        trainer.predict(model, loader(1))


@pytest.mark.parametrize("run", ["fit", "validate"])
def test_a_run_that_fails_leaves_gradient_mode_as_it_found_it(run: str) -> None:
    """A failure can skip a ``no_grad`` block's own restore: torch raises a dead DataLoader worker's error from its
    SIGCHLD handler in whatever code runs when the signal lands, ``no_grad.__exit__`` included. Here a hook turns
    gradients off and fails in the middle of a batch, as such an error does; the run still hands the process back
    with gradients on."""

    class FailsWithGradientsOff:
        def on_train_batch_start(self, trainer: ember.Trainer) -> None:
            torch.set_grad_enabled(False)
            raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed.")

        on_validation_batch_start = on_train_batch_start

    trainer = ember.Trainer(max_epochs=1, callbacks=[FailsWithGradientsOff()], num_sanity_val_steps=0, **QUIET)
    assert torch.is_grad_enabled()
    with pytest.raises(RuntimeError, match="is killed by signal"):
        getattr(trainer, run)(TinyClassifier(), loader(2))
    assert torch.is_grad_enabled()
    assert trainer.state.status == "failed"
