"""On a CUDA GPU: the default configuration does not wait for the device per step.

Between the logging interval's reads (``log_every_n_steps``), nothing in a training batch nor between two
batches may synchronise with the GPU: no ``.item()``, no ``float(tensor)``, no blocking copy. torch raises on
any such call while ``torch.cuda.set_sync_debug_mode("error")`` is on, which these tests switch on for every
step that is not a logging step. Skipped without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.testing import TinyClassifier, tiny_loaders

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EVERY = 5


class SyncGuard:
    """Sync debug mode "error" from the start of each batch to the start of the next, except around the
    steps whose metrics the logger reads (and the epoch's last batch, after which validation reads its
    results and the progress bar prints its line)."""

    def __init__(self) -> None:
        self.checked = 0

    @ember.hookimpl(tryfirst=True)
    def on_train_batch_start(self, trainer: Any, batch_idx: int) -> None:
        logging_step = (trainer.global_step + 1) % trainer.config.log_every_n_steps == 0
        last = batch_idx + 1 >= trainer.num_training_batches
        checked = not (logging_step or last)
        self.checked += checked
        torch.cuda.set_sync_debug_mode("error" if checked else "default")

    @ember.hookimpl(tryfirst=True)
    def on_train_epoch_end(self) -> None:
        torch.cuda.set_sync_debug_mode("default")


class LogsEveryStep(TinyClassifier):
    """Logs its loss every step for the progress bar and the epoch mean (so values are kept and folded)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True)
        return loss


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_default_configuration_syncs_only_at_the_logging_interval(tmp_path: Any, precision: str) -> None:
    train, val = tiny_loaders(n=8 * 300, batch_size=8)  # 300 steps: the epoch values are folded (every 256)
    guard = SyncGuard()
    trainer = ember.Trainer(max_epochs=2, accelerator="cuda", precision=precision, log_every_n_steps=EVERY,
                            default_root_dir=tmp_path, callbacks=[guard], limit_val_batches=4)
    try:
        trainer.fit(LogsEveryStep(), train, val)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 600
    assert guard.checked >= 600 - 600 // EVERY - 2
    assert torch.isfinite(trainer.callback_metrics["train_loss_epoch"])


def test_the_gpu_benchmark_smoke_run(tmp_path: Any) -> None:
    """``python -m benchmarks --quick --only gpu`` runs the transformer on the GPU and reports tokens/s."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "gpu", "--loops", "ember",
                           "ember+defaults", "--json", str(out)], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "GPU: skipped" not in proc.stdout and "tokens/s" in proc.stdout
    groups = json.loads(out.read_text())["groups"]  # one per precision, and bf16-mixed compiled
    assert all(group["title"].startswith("GPU: ") for group in groups)
    assert {p for p in ("bf16-mixed", "16-mixed") if any(p in group["title"] for group in groups)} == {
        "bf16-mixed", "16-mixed"}
    for group in groups:
        labels = {label.removesuffix(" (compiled)") for label in group["loops"]}
        assert labels == {"ember", "ember+defaults"}, group["title"]
        assert all(len(loop["times"]) == 2 and all(t > 0 for t in loop["times"])
                   for loop in group["loops"].values()), group["title"]
