"""The everyday callbacks: learning-rate monitor, model summary, timer / max_time, gradient norms, NaN guard,
prediction writer."""

from __future__ import annotations

import csv
import datetime
import logging
import math
import os
import time

import pytest
import torch

import ember
from ember.core.hooks.config import parse_duration
from ember.plugins.callbacks import (
    GradNormMonitor,
    LearningRateMonitor,
    ModelSummary,
    NanGuard,
    PredictionWriter,
    Timer,
)
from ember.plugins.callbacks.model_summary import summarize
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False}


# -- learning-rate monitor ---------------------------------------------------------------------------------


class Scheduled(TinyClassifier):
    def configure_optimizers(self):
        opt = torch.optim.SGD([{"params": self.net[0].parameters()}, {"params": self.net[2].parameters(),
                                                                       "lr": 0.5}], lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def test_lr_monitor_logs_the_lr_of_every_step(tmp_path):
    trainer = ember.Trainer(max_epochs=1, log_every_n_steps=1, callbacks=["lr-monitor"], logger="csv",
                            default_root_dir=tmp_path, **QUIET)
    trainer.fit(Scheduled(), tiny_loaders(n=56)[0])  # 7 steps
    with open(trainer.logger.metrics_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["lr-SGD/pg1"]]
    # the lr used by step s (1-based): halved every 2 steps
    assert [(int(r["step"]), float(r["lr-SGD/pg1"]), float(r["lr-SGD/pg2"])) for r in rows] == \
        [(s, pytest.approx(0.1 * 0.5 ** ((s - 1) // 2)), pytest.approx(0.5 * 0.5 ** ((s - 1) // 2)))
         for s in range(1, 8)]


def test_lr_monitor_per_epoch_with_momentum_and_names(tmp_path):
    class Named(TinyClassifier):
        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=0.01, betas=(0.8, 0.99))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.ExponentialLR(
                opt, gamma=0.1), "name": "decay"}}

    seen = []

    class Spy:
        def on_train_epoch_end(self, trainer):
            seen.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("decay")})

    monitor = LearningRateMonitor(log_momentum=True, log_weight_decay=True)
    trainer = ember.Trainer(max_epochs=3, logger="csv", default_root_dir=tmp_path, callbacks=[monitor, Spy()],
                            **QUIET)
    trainer.fit(Named(), tiny_loaders(n=16)[0])
    # a scheduler's name is the logged name as it is (Lightning's)
    assert [d["decay"] for d in seen] == pytest.approx([0.01, 0.001, 0.0001])
    assert seen[0]["decay-momentum"] == pytest.approx(0.8) and seen[0]["decay-weight_decay"] == 0.0
    with pytest.raises(ember.ConfigurationError, match="logging_interval"):
        LearningRateMonitor(logging_interval="batch")


# -- model summary -----------------------------------------------------------------------------------------


def test_model_summary_counts_and_prints(capsys):
    model = TinyClassifier()  # 8*16+16 + 16*3+3 = 195 parameters
    model.net[0].weight.requires_grad_(False)
    summary = summarize(model)
    assert (summary.trainable, summary.non_trainable, summary.total) == (67, 128, 195)
    assert summary.size_bytes == 195 * 4
    assert [(r.name, r.type, r.params) for r in summary.rows] == [("net", "Sequential", 195)]
    assert [r.name for r in summarize(model, max_depth=2).rows] == ["net", "net.0", "net.1", "net.2"]
    ember.Trainer(max_epochs=1, logger=False, **{**QUIET, "enable_model_summary": True}).fit(
        model, tiny_loaders(n=8)[0])
    out = capsys.readouterr().out
    assert "Sequential" in out and "67       Trainable params" in out and "195      Total params" in out
    assert "0.001    Total estimated model params size (MB)" in out


def test_model_summary_flag_and_replacement(capsys):
    trainer = ember.Trainer(accelerator="cpu", enable_model_summary=False)
    assert not any(isinstance(c, ModelSummary) for c in trainer.callbacks)
    deep = ModelSummary(max_depth=2)
    trainer = ember.Trainer(accelerator="cpu", callbacks=[deep])
    assert [c for c in trainer.callbacks if isinstance(c, ModelSummary)] == [deep]
    with pytest.raises(ember.ConfigurationError, match="enable_model_summary=False"):
        ember.Trainer(accelerator="cpu", enable_model_summary=False, callbacks=[deep])


# -- timer / max_time --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [
    ("00:01:00:00", 3600), ({"minutes": 2}, 120), (90, 90), (0.5, 0.5), (datetime.timedelta(hours=1), 3600),
])
def test_max_time_spellings(value, seconds):
    assert parse_duration(value).total_seconds() == seconds
    timers = [c for c in ember.Trainer(accelerator="cpu", max_time=value).callbacks if isinstance(c, Timer)]
    assert len(timers) == 1


@pytest.mark.parametrize("value", ["1 hour", {"hour": 1}, -5, True])
def test_max_time_errors_name_the_argument(value):
    with pytest.raises(ember.ConfigurationError, match="max_time"):
        ember.Trainer(accelerator="cpu", max_time=value)


def test_no_timer_without_max_time():
    assert not any(isinstance(c, Timer) for c in ember.Trainer(accelerator="cpu").callbacks)


def test_max_time_stops_training_mid_epoch():
    class Slow(TinyClassifier):
        def training_step(self, batch, batch_idx):
            time.sleep(0.02)
            return super().training_step(batch, batch_idx)

    trainer = ember.Trainer(max_epochs=100, max_time={"milliseconds": 150}, logger=False, **QUIET)
    trainer.fit(Slow(), tiny_loaders(n=400)[0])  # 50 batches per epoch, about 1 s each
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    assert trainer.current_epoch == 1 and 0 < trainer.global_step < 50
    assert 0.15 <= timer.time_elapsed("train") < 1.0
    assert timer.time_remaining() <= 0


def test_timer_epoch_interval_and_state():
    class Slow(TinyClassifier):
        def training_step(self, batch, batch_idx):
            time.sleep(0.01)
            return super().training_step(batch, batch_idx)

    timer = Timer(duration=0.005, interval="epoch", verbose=False)
    trainer = ember.Trainer(max_epochs=5, logger=False, callbacks=[timer], **QUIET)
    trainer.fit(Slow(), tiny_loaders(n=16)[0])  # spent during the first batch, checked at the epoch's end
    assert trainer.current_epoch == 1 and trainer.global_step == 2
    restored = Timer()
    restored.load_state_dict(timer.state_dict())
    assert restored.time_elapsed("train") == pytest.approx(timer.time_elapsed("train"))


@pytest.mark.parametrize(("duration", "says"), [
    (None, "already contains a Timer, without a duration of its own; it stops the fit after max_time"),
    (60, "is ignored: the callbacks list already contains a Timer, whose own duration (0:01:00) applies"),
])
def test_max_time_beside_a_timer_in_callbacks_says_which_duration_applies(caplog, duration, says):
    timer = Timer(duration=duration, verbose=False)
    trainer = ember.Trainer(max_epochs=1, logger=False, max_time=30, callbacks=[timer], **QUIET)
    with caplog.at_level(logging.INFO, logger="ember"):
        trainer.fit(TinyClassifier(), tiny_loaders(n=8)[0])
    assert says in caplog.text
    assert timer.duration == datetime.timedelta(seconds=duration or 30)
    assert [c for c in trainer.callbacks if isinstance(c, Timer)] == [timer]


def test_timer_lightning_private_names():
    """``_duration`` (seconds) and ``_offset`` (the training time a checkpoint restored), read by code written for
    Lightning's Timer."""
    timer = Timer(duration={"minutes": 2})
    assert timer._duration == 120 and timer._offset == 0 and Timer()._duration is None
    timer.load_state_dict({"time_elapsed": {"train": 4.5, "validate": 1.0}})
    assert timer._offset == 4.5 and timer.time_elapsed("train") == 4.5


# -- gradient norms ----------------------------------------------------------------------------------------


def test_grad_norm_is_the_norm_before_clipping():
    norms = []

    class Reference:
        @ember.hookimpl(trylast=True)
        def on_before_optimizer_step(self, trainer, module):
            grads = [p.grad for p in module.parameters()]
            norms.append((float(trainer.callback_metrics["grad_2.0_norm_total"]),
                          float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))),
                          float(trainer.callback_metrics["grad_2.0_norm/net.0.weight"]),
                          float(module.net[0].weight.grad.norm())))

    trainer = ember.Trainer(max_epochs=1, logger=False, gradient_clip_val=1e-3,
                            callbacks=[GradNormMonitor(per_layer=True), Reference()], **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=24)[0])
    assert len(norms) == 3
    for total, expected_total, layer, expected_layer in norms:
        assert total == pytest.approx(expected_total, rel=1e-5) and total > 1e-3
        assert layer == pytest.approx(expected_layer, rel=1e-5)


def test_grad_norm_inf_norm():
    trainer = ember.Trainer(max_epochs=1, logger=False, callbacks=[GradNormMonitor(norm_type="inf")], **QUIET)
    model = TinyClassifier()
    trainer.fit(model, tiny_loaders(n=8)[0])
    assert "grad_inf_norm_total" in trainer.callback_metrics


# -- NaN guard ---------------------------------------------------------------------------------------------


class GoesNaN(TinyClassifier):
    """The loss is NaN on the given batches (counted over the whole fit, from 0)."""

    def __init__(self, bad_batches=(3,)):
        super().__init__()
        self.bad = set(bad_batches)
        self.calls = 0

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.calls += 1
        return loss * math.nan if self.calls - 1 in self.bad else loss


def test_nan_guard_stop_keeps_the_weights_and_names_the_step(caplog):
    model = GoesNaN(bad_batches=(3,))
    weights = {}

    class Snapshot:
        def on_train_batch_start(self, trainer, batch_idx):
            weights[batch_idx] = [p.detach().clone() for p in trainer.module.parameters()]

    trainer = ember.Trainer(max_epochs=3, logger=False, callbacks=["nan-guard", Snapshot()], **QUIET)
    with caplog.at_level(logging.ERROR, logger="ember"):
        trainer.fit(model, tiny_loaders(n=64)[0])
    # stopped after the bad batch, whose (empty) optimizer step counts, as for a None from training_step
    assert trainer.global_step == 4 and trainer.current_epoch == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(weights[3], model.parameters(), strict=True))  # not applied
    assert "epoch 0, batch 3, global step 3" in caplog.text and "nan" in caplog.text


def test_nan_guard_skip_goes_on():
    guard = NanGuard(action="skip")
    model = GoesNaN(bad_batches=(1, 9))
    trainer = ember.Trainer(max_epochs=2, logger=False, callbacks=[guard], **QUIET)
    trainer.fit(model, tiny_loaders(n=64)[0])  # 8 batches per epoch
    assert trainer.global_step == 16 and trainer.current_epoch == 2  # skipped updates count, as in Lightning
    assert [(s["epoch"], s["batch_idx"]) for s in guard.skipped] == [(0, 1), (1, 1)]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nan_guard_raise_and_gradients():
    trainer = ember.Trainer(max_epochs=1, logger=False, callbacks=[NanGuard(action="raise")], **QUIET)
    with pytest.raises(FloatingPointError, match="epoch 0, batch 2, global step 2"):
        trainer.fit(GoesNaN(bad_batches=(2,)), tiny_loaders(n=64)[0])

    class InfGrad(TinyClassifier):
        def on_after_backward(self):
            if self.trainer.global_step == 1:
                self.net[2].bias.grad[0] = math.inf

    guard = NanGuard(action="skip")
    model = InfGrad()
    trainer = ember.Trainer(max_epochs=1, logger=False, callbacks=[guard], **QUIET)
    trainer.fit(model, tiny_loaders(n=32)[0])
    assert [s["what"] for s in guard.skipped] == ["non-finite gradients in 'net.2.bias'"]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(ember.ConfigurationError, match="action='ignore'"):
        NanGuard(action="ignore")


# -- prediction writer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
def test_prediction_writer_files_hold_the_predictions(tmp_path, interval):
    writer = PredictionWriter(tmp_path / "preds", write_interval=interval)
    model = TinyClassifier()
    trainer = ember.Trainer(logger=False, callbacks=[writer], **QUIET)
    _, loader = tiny_loaders(n=20)  # batches of 8, 8, 4
    expected = trainer.predict(model, loader)
    files = sorted(os.listdir(tmp_path / "preds"))
    if interval in ("batch", "batch_and_epoch"):
        for b in range(3):
            saved = torch.load(tmp_path / "preds" / f"predictions_rank0_dl0_batch{b}.pt", weights_only=True)
            assert torch.equal(saved["predictions"], expected[b]) and saved["batch_idx"] == b
    if interval in ("epoch", "batch_and_epoch"):
        saved = torch.load(tmp_path / "preds" / "predictions_rank0_dl0.pt", weights_only=True)
        assert all(torch.equal(a, b) for a, b in zip(saved["predictions"], expected, strict=True))
    assert len(files) == {"batch": 3, "epoch": 1, "batch_and_epoch": 4}[interval]


def test_prediction_writer_default_folder(tmp_path):
    trainer = ember.Trainer(logger=False, default_root_dir=tmp_path, callbacks=["prediction-writer"], **QUIET)
    assert trainer.predict(TinyClassifier(), tiny_loaders(n=8)[1], return_predictions=False) is None
    assert os.listdir(tmp_path / "predictions") == ["predictions_rank0_dl0_batch0.pt"]
