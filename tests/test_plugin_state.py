"""Plugin state has one route into and out of checkpoints: ``state_dict``/``load_state_dict``, keyed by identity
(or ``state_key``) under ``checkpoint["plugins"]``, saved once per checkpoint and restored once per resume."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember
from ember.core.checkpointing.checkpoint import FORMAT_VERSION
from ember.plugins.callbacks import EarlyStopping
from ember.plugins.callbacks.timer import Timer
from ember.testing import TinyClassifier, tiny_loaders

ARGS = {"num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
        "enable_checkpointing": False, "accelerator": "cpu"}


class Counter:
    identity = "callback.counter"

    def __init__(self) -> None:
        self.saved = self.loaded = 0
        self.value = 0

    def on_train_batch_end(self) -> None:
        self.value += 1

    def state_dict(self) -> dict[str, Any]:
        self.saved += 1
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loaded += 1
        self.value = state["value"]


def _fit(tmp_path: Any, callbacks: list[Any], max_epochs: int = 2, ckpt_path: Any = None) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=max_epochs, callbacks=callbacks, default_root_dir=str(tmp_path), **ARGS)
    train, val = tiny_loaders(n=16)
    trainer.fit(TinyClassifier(), train, val, ckpt_path=ckpt_path)
    return trainer


def test_a_plugin_state_is_saved_once_and_restored_once(tmp_path: Any) -> None:
    counter = Counter()
    trainer = _fit(tmp_path, [counter])
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    assert counter.saved == 1 and counter.loaded == 0
    saved = torch.load(path, weights_only=True)
    assert saved["format_version"] == FORMAT_VERSION
    # Lightning's name for it is the same object, not a second copy
    assert saved["callbacks"]["callback.counter"] is saved["plugins"]["callback.counter"]
    assert saved["plugins"]["callback.counter"] == {"value": 4}

    again = Counter()
    _fit(tmp_path, [again], max_epochs=3, ckpt_path=path)
    assert again.loaded == 1 and again.saved == 0
    assert again.value == 4 + 2  # restored, then two more batches


def test_early_stopping_and_timer_state_travel_once_under_their_keys(tmp_path: Any) -> None:
    stopping = EarlyStopping(monitor="val_loss", patience=5)
    timer = Timer(duration="00:01:00:00")
    trainer = _fit(tmp_path, [stopping, timer])
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)
    assert all(any(state is kept for kept in saved["plugins"].values()) for state in saved["callbacks"].values())
    assert saved["plugins"]["EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}"]["best_score"] == pytest.approx(
        float(stopping.best_score))
    assert saved["plugins"]["callback.timer"]["time_elapsed"]["train"] > 0

    calls: list[str] = []

    class Watched(EarlyStopping):
        def load_state_dict(self, state: dict[str, Any]) -> None:
            calls.append("early-stopping")
            super().load_state_dict(state)

    resumed, resumed_timer = Watched(monitor="val_loss", patience=5), Timer(duration="00:01:00:00")
    _fit(tmp_path, [resumed, resumed_timer], max_epochs=2, ckpt_path=path)
    assert calls == ["early-stopping"]
    assert float(resumed.best_score) == pytest.approx(float(stopping.best_score))
    assert resumed_timer.time_elapsed("train") >= saved["plugins"]["callback.timer"]["time_elapsed"]["train"]


def test_a_format_1_checkpoint_with_states_only_under_callbacks_still_resumes(tmp_path: Any) -> None:
    stopping = EarlyStopping(monitor="val_loss", patience=5)
    trainer = _fit(tmp_path, [stopping])
    path = tmp_path / "new.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    state = checkpoint["plugins"].pop("EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}")
    state["wait_count"] = 3  # distinct from anything a fresh callback holds
    checkpoint["format_version"] = 1
    checkpoint["callbacks"] = {"callback.early-stopping[val_loss]": state}  # the key before Lightning's form
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)

    resumed = EarlyStopping(monitor="val_loss", patience=50)
    _fit(tmp_path, [resumed], max_epochs=2, ckpt_path=old)  # already at max_epochs: restores, trains nothing
    assert resumed.wait_count == 3 and resumed.patience == 5


def test_two_plugins_under_one_key_are_an_error(tmp_path: Any) -> None:
    class Same(Counter):
        state_key = "shared"

    trainer = _fit(tmp_path, [Same(), Same()], max_epochs=1)
    with pytest.raises(ember.ConfigurationError, match="same checkpoint key 'shared'.*distinct state_key"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
