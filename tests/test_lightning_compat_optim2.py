"""Lightning's optimizer step as a module sees it: what ``opt.step()`` returns under manual optimization, and an
optimizer with its own ``step`` stepping with the closure that runs the training step (automatic optimization), as
Lightning's own tests of the optimizer wrapper and the train loop found ember different."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.lightning.pytorch.plugins import Precision
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False, "enable_checkpointing": False, "max_epochs": 1, "limit_val_batches": 0}


class Recording(torch.optim.SGD):
    """An optimizer with its own ``step`` (as a user's or a library's is): records the calls in ``calls``."""

    def __init__(self, params, calls: list[str], evaluations: int = 1) -> None:
        super().__init__(params, lr=0.1)
        self.calls, self.evaluations = calls, evaluations

    def step(self, closure=None):
        self.calls.append("step")
        loss = None
        for _ in range(self.evaluations if closure is not None else 0):  # 2: a sharpness-aware optimizer's two passes
            loss = closure()
        super().step()
        return ("stepped", loss)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.calls.append("zero_grad")
        super().zero_grad(set_to_none=set_to_none)


class Ordered(TinyClassifier):
    """Records training_step, backward and on_before_optimizer_step next to the optimizer's calls."""

    def __init__(self, evaluations: int = 1) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.evaluations = evaluations

    def training_step(self, batch, batch_idx):
        self.calls.append("training_step")
        return super().training_step(batch, batch_idx)

    def backward(self, loss, *args, **kwargs):
        self.calls.append("backward")
        super().backward(loss, *args, **kwargs)

    def on_before_optimizer_step(self, optimizer):
        self.calls.append("on_before_optimizer_step")

    def configure_optimizers(self):
        return Recording(self.parameters(), self.calls, self.evaluations)


def _fit(model, **kwargs) -> ember.Trainer:
    trainer = ember.Trainer(**{**QUIET, **kwargs})
    trainer.fit(model, tiny_loaders(n=32, batch_size=8)[0])
    return trainer


ONE_STEP = ["step", "training_step", "zero_grad", "backward", "on_before_optimizer_step"]


def test_an_optimizer_with_its_own_step_is_entered_before_the_training_step_it_evaluates():
    model = Ordered()
    trainer = _fit(model, limit_train_batches=2)
    assert model.calls == ONE_STEP * 2 and trainer.global_step == 2


def test_accumulation_with_an_own_step_optimizer_keeps_lightnings_order():
    model = Ordered()
    _fit(model, limit_train_batches=4, accumulate_grad_batches=3)
    assert model.calls == [
        "training_step", "zero_grad", "backward",  # 0
        "training_step", "backward",  # 1
        "step", "training_step", "backward", "on_before_optimizer_step",  # 2: the window's last batch steps
        "step", "training_step", "zero_grad", "backward", "on_before_optimizer_step",  # 3: the epoch's last batch
    ]


def test_an_own_step_optimizer_may_evaluate_the_closure_twice():
    model = Ordered(evaluations=2)
    trainer = _fit(model, limit_train_batches=2)
    assert model.calls == (["step"] + ONE_STEP[1:] * 2) * 2 and trainer.global_step == 2


@pytest.mark.filterwarnings(r"ignore:.*backward\(\) is not called")  # 16-mixed's scaler does the backward itself
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_an_own_step_optimizer_steps_under_mixed_precision(precision):
    model = Ordered()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _fit(model, limit_train_batches=2, precision=precision)
    assert model.calls.count("training_step") == 2 and trainer.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_lightning_precision_plugin_hands_the_closure_to_an_own_step_optimizer_once():
    model = Ordered()
    trainer = _fit(model, limit_train_batches=2, plugins=[Precision()])
    assert model.calls == ONE_STEP * 2 and trainer.global_step == 2


class Manual(TinyClassifier):
    """Manual optimization that keeps what ``opt.step(...)`` returned."""

    def __init__(self, own_step: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.own_step = own_step
        self.returned: list[object] = []
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def closure():
            loss = super(Manual, self).training_step(batch, batch_idx)
            opt.zero_grad()
            self.manual_backward(loss)
            self.losses.append(loss)
            return loss

        self.returned.append(opt.step(closure=closure) if batch_idx % 2 == 0 else opt.step())

    def configure_optimizers(self):
        if self.own_step:
            return Recording(self.parameters(), [])
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_manual_step_returns_what_the_optimizers_step_returned():
    model = Manual()
    _fit(model, limit_train_batches=4)
    # torch's SGD returns the closure's loss, and nothing without a closure
    assert model.returned[0] is model.losses[0] and model.returned[2] is model.losses[1]
    assert model.returned[1] is None and model.returned[3] is None


def test_manual_step_returns_an_own_step_optimizers_answer():
    model = Manual(own_step=True)
    trainer = _fit(model, limit_train_batches=2)
    assert model.returned[0] == ("stepped", model.losses[0]) and model.returned[1] == ("stepped", None)
    assert trainer.global_step == 2


def test_manual_step_under_16_mixed_returns_the_scalers_answer():
    model = Manual()
    _fit(model, limit_train_batches=2, precision="16-mixed")
    # GradScaler.step returns the optimizer's own return value (SGD stepped without the closure: None)
    assert model.returned == [None, None] and len(model.losses) == 1


def test_lbfgs_under_a_lightning_precision_plugin_evaluates_the_loops_closure():
    class LBFGSModel(Ordered):
        def configure_optimizers(self):
            return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)

    model = LBFGSModel()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _fit(model, limit_train_batches=2, plugins=[Precision()])
    # LBFGS evaluates the loss up to max_iter times per step: each evaluation runs the training step and backward
    assert model.calls.count("training_step") > 2 and model.calls.count("training_step") == model.calls.count("backward")
    assert trainer.global_step == 2 and any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
