"""16-mixed with a fused optimizer takes the loss scale and the inf flag on the device: no host sync per step."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember
from ember.plugins.precision.fp16_mixed import FP16Mixed, scales_on_device
from ember.testing import TinyClassifier, tiny_loaders


class Fused(TinyClassifier):
    def __init__(self, optimizer: str = "AdamW") -> None:
        super().__init__()
        self.optimizer = optimizer

    def configure_optimizers(self) -> Any:
        fused = self.optimizer != "RMSprop"
        kwargs = {"fused": True} if fused else {}
        return getattr(torch.optim, self.optimizer)(self.parameters(), lr=0.01, **kwargs)


def test_which_optimizers_take_the_scale_on_the_device() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    for name in ("Adam", "AdamW", "SGD", "Adagrad"):
        fused = getattr(torch.optim, name)(params, lr=0.1, fused=True)
        # Adagrad's fused kernel takes the scale from torch 2.12 (2.8 to 2.10 do not offer it at all)
        if name != "Adagrad" or torch.__version__ >= (2, 12):
            assert scales_on_device(fused), name
        assert not scales_on_device(getattr(torch.optim, name)(params, lr=0.1)), name
    assert not scales_on_device(torch.optim.RMSprop(params, lr=0.1))


@pytest.mark.parametrize(("optimizer", "says"), [("AdamW", "is fused"), ("RMSprop", "one synchronisation per step")])
def test_the_plugin_says_once_whether_an_optimizer_syncs(tmp_path: Any, caplog: pytest.LogCaptureFixture,
                                                          optimizer: str, says: str) -> None:
    trainer = ember.Trainer(accelerator="cpu", precision="16-mixed", max_epochs=1, default_root_dir=tmp_path,
                            logger=False, enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False)
    with caplog.at_level(logging.DEBUG, logger="ember"):
        trainer.fit(Fused(optimizer), tiny_loaders(n=32)[0])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("16-mixed:")]
    assert len(lines) == 1 and says in lines[0] and optimizer in lines[0]
    assert isinstance(trainer.role_plugins["precision"], FP16Mixed)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("optimizer", ["Adam", "AdamW", "SGD"])
def test_fused_16_mixed_steps_without_a_host_sync(tmp_path: Any, optimizer: str) -> None:
    class Guard:
        steps = 0

        @ember.hookimpl(tryfirst=True)
        def on_train_batch_start(self, batch_idx: int) -> None:
            torch.cuda.set_sync_debug_mode("error" if 0 < batch_idx < 15 else "default")

        @ember.hookimpl(trylast=True)
        def on_train_batch_end(self, batch_idx: int) -> None:
            self.steps += 0 < batch_idx < 15
            torch.cuda.set_sync_debug_mode("default")

    class Overflows(Fused):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * float("inf") if batch_idx == 5 else loss  # one step the scaler must skip

    guard = Guard()
    train, _ = tiny_loaders(n=8 * 16, batch_size=8)
    trainer = ember.Trainer(accelerator="cuda", precision="16-mixed", max_epochs=1, default_root_dir=tmp_path,
                            logger=False, enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False, log_every_n_steps=1000, callbacks=[guard])
    try:
        trainer.fit(Overflows(optimizer), train)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert guard.steps == 14
    assert trainer.role_plugins["precision"].scaler.get_scale() < 2.0**16  # the overflow was seen and the scale halved
    assert all(torch.isfinite(p).all() for p in trainer.module.parameters())
