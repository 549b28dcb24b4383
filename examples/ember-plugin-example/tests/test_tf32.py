"""Tests of ``precision.tf32``, written with the fixtures of ``ember.testing`` (loaded by pytest11)."""

from __future__ import annotations

import pytest
import torch
from ember_plugin_example import TF32Precision

import ember
from ember.testing import TinyClassifier, check_plugin


class MatmulPrecisionProbe(TinyClassifier):
    """Records the float32 matmul precision in force during the forward and the backward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def training_step(self, batch, batch_idx):
        self.seen.add(("forward", torch.get_float32_matmul_precision()))
        return super().training_step(batch, batch_idx)

    def on_after_backward(self) -> None:
        self.seen.add(("backward", torch.get_float32_matmul_precision()))


def test_selectable_by_name(ember_trainer) -> None:
    trainer = ember_trainer(precision="tf32")
    assert trainer.role_identities["precision"] == "precision.tf32"
    assert isinstance(trainer.role_plugins["precision"], TF32Precision)
    assert trainer.precision == "tf32"


def test_discovered_from_this_distribution() -> None:
    info = ember.Trainer().discovery.lookup("precision", "tf32")
    assert (info.dist_name, info.dist_version) == ("ember-plugin-example", "0.1.0")


def test_forward_and_backward_run_at_high_precision_then_restored(ember_run) -> None:
    before = torch.get_float32_matmul_precision()
    probe = MatmulPrecisionProbe()
    result = ember_run(model=probe, precision="tf32", limit_train_batches=2)
    assert probe.seen == {("forward", "high"), ("backward", "high")}
    assert torch.get_float32_matmul_precision() == before
    result.recorder.assert_called("setup", by="precision.tf32")
    result.recorder.assert_called("teardown", by="precision.tf32")
    assert result.trainer.global_step == 2


def test_restored_after_a_failing_step(ember_trainer, tiny_data) -> None:
    class Boom(TinyClassifier):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("boom")

    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError, match="boom"):
        ember_trainer(precision="tf32").fit(Boom(), *tiny_data)
    assert torch.get_float32_matmul_precision() == before


def test_hooks_and_validation() -> None:
    assert check_plugin(TF32Precision()) == ["setup", "teardown"]
    with pytest.raises(ember.ConfigurationError, match="matmul_precision='low'"):
        TF32Precision("low")


def test_an_instance_works_too(ember_run) -> None:
    probe = MatmulPrecisionProbe()
    ember_run(TF32Precision("medium"), model=probe, limit_train_batches=1)
    assert probe.seen == {("forward", "medium"), ("backward", "medium")}
