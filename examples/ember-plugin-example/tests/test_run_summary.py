"""Tests of ``callback.run-summary`` (off until ``Trainer(run_summary=True)``), written with the fixtures of
``ember.testing``."""

from __future__ import annotations

import json

import pytest
from ember_plugin_example import RunSummary

from ember.testing import TinyClassifier, checkpoint_roundtrip


def test_installing_the_package_changes_no_run(ember_run, tmp_path) -> None:
    result = ember_run()
    assert "callback.run-summary" not in dict(result.trainer.extra_plugins)
    assert not (tmp_path / "run_summary.json").exists()


@pytest.mark.parametrize("how", [{"run_summary": True}, {"callbacks": ["run-summary"]}])
def test_switched_on_by_its_argument_or_by_name(ember_trainer, how) -> None:
    trainer = ember_trainer(**how)
    assert isinstance(dict(trainer.extra_plugins)["callback.run-summary"], RunSummary)


def test_writes_the_summary_after_fit(ember_run, tmp_path) -> None:
    result = ember_run(max_epochs=2, run_summary=True)
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["outcome"] == "finished"
    assert summary["epochs"] == 2
    assert summary["global_step"] == 16  # 64 samples in batches of 8, two epochs
    assert summary["precision"] == "32-true"
    assert summary["metrics"]["val_acc"] == pytest.approx(float(result.trainer.callback_metrics["val_acc"]))
    assert summary["fits"] == 1
    result.recorder.assert_called("on_fit_end", times=1, by="callback.run-summary")


def test_records_a_failed_fit(ember_trainer, tiny_data, tmp_path) -> None:
    class Boom(TinyClassifier):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise ValueError("bad batch")
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="bad batch"):
        ember_trainer(run_summary=True).fit(Boom(), *tiny_data)
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["outcome"] == "failed: ValueError: bad batch"
    assert summary["global_step"] == 3


def test_blocking_wins_over_the_argument(ember_run, tmp_path) -> None:
    result = ember_run(run_summary=True, block_plugins=["callback.run-summary"])
    assert not (tmp_path / "run_summary.json").exists()
    assert "callback.run-summary" not in result.recorder.plugins_for("on_fit_end")


def test_blocking_by_environment_wins_too(ember_run, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMBER_BLOCK_PLUGINS", "callback.run-summary")
    ember_run(run_summary=True)
    assert not (tmp_path / "run_summary.json").exists()


def test_totals_survive_a_checkpoint() -> None:
    saved = RunSummary()
    saved.total_seconds, saved.fits = 12.5, 3
    restored = RunSummary()
    checkpoint = checkpoint_roundtrip(saved, restored)
    assert checkpoint["plugins"]["callback.run-summary"] == {"total_seconds": 12.5, "fits": 3}
    assert (restored.total_seconds, restored.fits) == (12.5, 3)
