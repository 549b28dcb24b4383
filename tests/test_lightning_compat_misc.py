"""Lightning's behaviour where its own tests of the optimizer step, ``self.log`` and the loggers found ember
different (trainer/optimization/, trainer/logging_/, core/test_lightning_optimizer.py, loggers/)."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False, "enable_checkpointing": False}


# -- optimizers that evaluate the loss themselves (LBFGS) -----------------------------------------------------


class Counting(TinyClassifier):
    """Counts training steps and ``on_before_optimizer_step`` calls; ``opt`` makes the optimizer."""

    def __init__(self, opt=lambda params: torch.optim.LBFGS(params, lr=0.1, max_iter=3), manual: bool = False):
        super().__init__()
        self.make, self.steps, self.before = opt, 0, 0
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        self.steps += 1
        out = super().training_step(batch, batch_idx)
        if self.automatic_optimization:
            return out
        opt = self.optimizers()
        loss = out["loss"] if isinstance(out, dict) else out

        def closure():
            opt.zero_grad()
            self.manual_backward(super(Counting, self).training_step(batch, batch_idx)["loss"]
                                 if isinstance(out, dict) else super(Counting, self).training_step(batch, batch_idx))
            return loss
        opt.step(closure=closure)

    def on_before_optimizer_step(self, optimizer):
        self.before += 1

    def configure_optimizers(self):
        return self.make(self.parameters())


def test_lbfgs_in_automatic_optimization_evaluates_the_closure_itself():
    torch.manual_seed(0)
    model = Counting()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = ember.Trainer(max_steps=2, **QUIET)
    trainer.fit(model, tiny_loaders()[0])
    assert trainer.global_step == 2
    # LBFGS calls the closure up to max_iter (+1 for its line search) times per step; each call is a training
    # step and is followed by on_before_optimizer_step, as in Lightning
    assert model.steps > 2 and model.before == model.steps
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_lbfgs_under_accumulation_runs_one_backward_per_batch_outside_the_step(monkeypatch):
    calls = []
    original = torch.Tensor.backward
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: (calls.append(1), original(self, *a, **k)))
    model = Counting(opt=lambda params: torch.optim.LBFGS(params, lr=0.1, max_iter=1))
    ember.Trainer(max_steps=2, accumulate_grad_batches=2, **QUIET).fit(model, tiny_loaders()[0])
    assert len(calls) == model.steps == 4  # max_iter=1: one evaluation per step, one plain batch per window


def test_lbfgs_stepped_by_hand_gets_the_closure():
    model = Counting(manual=True)
    trainer = ember.Trainer(max_steps=2, **QUIET)
    trainer.fit(model, tiny_loaders()[0])
    assert trainer.global_step == 2 and model.before > 2


def test_lbfgs_under_16_mixed_says_they_do_not_combine():
    with pytest.raises(ember.ConfigurationError, match="AMP and the LBFGS optimizer are not compatible"):
        ember.Trainer(max_steps=1, precision="16-mixed", **QUIET).fit(Counting(), tiny_loaders()[0])
