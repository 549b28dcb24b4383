"""EarlyStopping against scripted metric sequences: it must stop at exactly the right epoch."""

from __future__ import annotations

import logging
import math

import pytest

import ember
from ember.plugins.callbacks import EarlyStopping
from ember.testing import TinyClassifier, tiny_loaders

ARGS = {"accelerator": "cpu",
        "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


class Scripted(TinyClassifier):
    """Logs ``score`` = ``values[current_epoch]`` from validation (or from the training-epoch end)."""

    def __init__(self, values, where="validation"):
        super().__init__()
        self.values = values
        self.where = where

    def validation_step(self, batch, batch_idx):
        if self.where == "validation":
            self.log("score", self.values[self.current_epoch])

    def on_train_epoch_end(self):
        if self.where == "train_epoch_end":
            self.log("score", self.values[self.current_epoch])


def fit(values, callback, where="validation", **kwargs):
    model = Scripted(values, where)
    trainer = ember.Trainer(max_epochs=len(values), callbacks=[callback], **{**ARGS, **kwargs})
    train, val = tiny_loaders(n=16)
    trainer.fit(model, train, val if where == "validation" else None)
    return trainer


@pytest.mark.parametrize(
    ("values", "kwargs", "stopped_epoch"),
    [
        # best 3.0 at epoch 2; no improvement at epochs 3 and 4: patience 2 stops at epoch 4
        ([5.0, 4.0, 3.0, 3.5, 3.2, 1.0, 1.0], {"patience": 2}, 4),
        # improvements smaller than min_delta do not count
        ([5.0, 4.95, 4.9, 4.85, 1.0, 1.0], {"patience": 2, "min_delta": 0.1}, 2),
        # mode max
        ([0.1, 0.2, 0.3, 0.25, 0.29, 0.9], {"patience": 2, "mode": "max"}, 4),
        # patience 0: the first check without improvement stops
        ([3.0, 2.0, 2.5, 1.0], {"patience": 0}, 2),
        # good enough: stopping_threshold
        ([5.0, 4.0, 0.4, 0.3, 0.2], {"patience": 10, "stopping_threshold": 0.5}, 2),
        # hopeless: divergence_threshold
        ([5.0, 4.0, 12.0, 1.0], {"patience": 10, "divergence_threshold": 10.0}, 2),
        # not finite
        ([5.0, 4.0, math.nan, 1.0], {"patience": 10}, 2),
    ],
)
def test_stops_at_the_right_epoch(values, kwargs, stopped_epoch):
    es = EarlyStopping(monitor="score", **kwargs)
    trainer = fit(values, es)
    assert es.stopped_epoch == stopped_epoch
    assert trainer.current_epoch == stopped_epoch + 1  # the stopping epoch completes
    assert trainer.should_stop


def test_no_stop_while_improving_and_check_finite_off():
    es = EarlyStopping(monitor="score", patience=1, check_finite=False)
    trainer = fit([5.0, 4.0, 3.0, 2.0], es)
    assert trainer.current_epoch == 4 and not trainer.should_stop and es.wait_count == 0
    es = EarlyStopping(monitor="score", patience=5, check_finite=False)
    trainer = fit([5.0, math.nan, 4.0, 3.0], es)
    assert trainer.current_epoch == 4 and not trainer.should_stop


def test_metric_logged_in_the_modules_epoch_end_hook_is_seen():
    """trylast on on_train_epoch_end: the check runs after the module's own hook logged the value."""
    es = EarlyStopping(monitor="score", patience=1)
    trainer = fit([3.0, 2.0, 2.5, 1.0, 1.0], es, where="train_epoch_end")
    assert es.stopped_epoch == 2 and trainer.current_epoch == 3


def test_checks_after_each_validation_when_validating_within_epochs():
    class PerValidation(TinyClassifier):
        def __init__(self):
            super().__init__()
            self.runs = 0

        def on_validation_epoch_start(self):
            self.runs += 1

        def validation_step(self, batch, batch_idx):
            self.log("score", [5.0, 4.0, 4.5, 4.6, 1.0, 1.0, 1.0, 1.0][self.runs - 1])

    es = EarlyStopping(monitor="score", patience=2)
    model = PerValidation()
    trainer = ember.Trainer(max_epochs=4, val_check_interval=0.5, callbacks=[es], **ARGS)
    trainer.fit(model, *tiny_loaders(n=32))  # 4 batches per epoch: validation after batch 2 and 4
    assert model.runs == 4  # checks 3 and 4 did not improve on 4.0: stop after the 4th validation
    assert trainer.current_epoch == 2


def test_min_epochs_holds_off_the_stop():
    es = EarlyStopping(monitor="score", patience=0)
    trainer = fit([3.0, 4.0, 5.0, 6.0, 7.0], es, min_epochs=4)
    assert trainer.current_epoch == 4


def test_missing_monitor_is_an_error_naming_the_logged_metrics(caplog):
    with pytest.raises(ember.ConfigurationError, match=r"'val_los'.*Logged metrics: score"):
        fit([1.0, 2.0], EarlyStopping(monitor="val_los"))
    with caplog.at_level(logging.WARNING, logger="ember"):
        trainer = fit([1.0, 2.0], EarlyStopping(monitor="val_los", strict=False))
    assert trainer.current_epoch == 2 and "val_los" in caplog.text


def test_bad_arguments_and_state_round_trip():
    with pytest.raises(ember.ConfigurationError, match="mode='minimum'"):
        EarlyStopping(monitor="x", mode="minimum")
    es = EarlyStopping(monitor="score", patience=3)
    fit([3.0, 2.0, 2.5], es)
    restored = EarlyStopping(monitor="score", patience=3)
    restored.load_state_dict(es.state_dict())
    assert (restored.wait_count, float(restored.best_score)) == (1, 2.0)


def test_selectable_by_name_with_defaults_needs_arguments():
    # the entry point instantiates with no arguments; EarlyStopping needs a monitor, so the error says so
    with pytest.raises(ember.PluginError, match="monitor"):
        ember.Trainer(accelerator="cpu", callbacks=["early-stopping"])


@pytest.mark.parametrize(("values", "kwargs", "reason", "words"), [
    ([3.0, 4.0, 5.0, 6.0], {"patience": 2}, "PATIENCE_EXHAUSTED", "did not improve"),
    ([3.0, 2.0, 1.0, 0.5], {"stopping_threshold": 1.5}, "STOPPING_THRESHOLD", "Stopping threshold reached"),
    ([3.0, 9.0, 1.0, 0.5], {"divergence_threshold": 8.0}, "DIVERGENCE_THRESHOLD", "Divergence threshold reached"),
    ([3.0, math.nan, 1.0, 0.5], {}, "NON_FINITE_METRIC", "is not finite"),
    ([3.0, 2.0, 1.0], {}, "NOT_STOPPED", None),
])
def test_stopping_reason_and_its_message_survive_the_state(values, kwargs, reason, words):
    from ember.plugins.callbacks.early_stopping import EarlyStoppingReason

    es = EarlyStopping(monitor="score", **kwargs)
    fit(values, es)
    assert es.stopping_reason is EarlyStoppingReason[reason]
    assert (es.stopping_reason_message is None) if words is None else (words in es.stopping_reason_message)
    restored = EarlyStopping(monitor="score")
    restored.load_state_dict(es.state_dict())
    assert (restored.stopping_reason, restored.stopping_reason_message) == (es.stopping_reason,
                                                                           es.stopping_reason_message)
    old = {k: v for k, v in es.state_dict().items() if not k.startswith("stopping_reason")}  # an older state
    restored.load_state_dict(old)
    assert restored.stopping_reason is EarlyStoppingReason.NOT_STOPPED
