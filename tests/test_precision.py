"""The built-in precisions, on the CPU: what dtype the math runs in, what dtype the weights keep, and where
16-mixed unscales and clips."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.plugins.callbacks.loss_check import NonFiniteLossWarning
from ember.testing import TinyClassifier, tiny_dataset

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def data(n: int = 16, batch_size: int = 4) -> DataLoader:
    return DataLoader(tiny_dataset(n=n), batch_size=batch_size)


class Probe(TinyClassifier):
    """Records the dtypes seen inside the steps."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[Any]] = {}

    def note(self, key: str, value: Any) -> None:
        self.seen.setdefault(key, set()).add(value)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        self.note("input", x.dtype)
        self.note("matmul", self.net[0](x).dtype)
        self.note("new_tensor", torch.zeros(1).dtype)
        self.note("param", self.net[0].weight.dtype)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.note("val_matmul", self.net[0](batch[0]).dtype)
        super().validation_step(batch, batch_idx)


def fit(precision: str, model: Any = None, **kwargs: Any) -> tuple[ember.Trainer, Any]:
    model = model if model is not None else Probe()
    trainer = ember.Trainer(**QUIET, precision=precision, max_epochs=1, num_sanity_val_steps=0, **kwargs)
    trainer.fit(model, data(), data(8))
    return trainer, model


def test_bf16_mixed_runs_matmuls_in_bfloat16_and_keeps_float32_weights() -> None:
    before = {k: v.clone() for k, v in Probe().state_dict().items()}
    trainer, model = fit("bf16-mixed")
    assert trainer.precision == "bf16-mixed"
    assert model.seen["matmul"] == {torch.bfloat16}
    assert model.seen["val_matmul"] == {torch.bfloat16}
    assert model.seen["input"] == {torch.float32}
    assert model.seen["param"] == {torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # autocast is off again outside the step
    assert not torch.is_autocast_enabled("cpu")


def test_64_true_trains_in_float64() -> None:
    default = torch.get_default_dtype()
    trainer, model = fit("64-true")
    assert model.seen == {"input": {torch.float64}, "matmul": {torch.float64}, "new_tensor": {torch.float64},
                          "param": {torch.float64}, "val_matmul": {torch.float64}}
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert torch.get_default_dtype() == default  # restored after each step


def test_64_true_restores_the_default_dtype_when_the_step_raises() -> None:
    class Fails(Probe):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("inside a float64 step")

    with pytest.raises(RuntimeError, match="inside a float64 step"):
        fit("64-true", Fails())
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16)])
def test_true_half_precisions_convert_the_module_and_inputs(precision: str, dtype: torch.dtype) -> None:
    model = Probe()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(precision, model)
    assert model.seen["param"] == {dtype}
    assert model.seen["input"] == {dtype}
    assert model.seen["matmul"] == {dtype}
    assert all(p.dtype == dtype for p in model.parameters())
    assert any(not torch.equal(before[k].to(dtype), v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(("alias", "name"), [("bf16", "bf16-mixed"), (16, "16-mixed"), ("64", "64-true"),
                                             (32, "32-true"), ("half", "16-true")])
def test_lightning_precision_aliases(alias: Any, name: str) -> None:
    assert ember.Trainer(**QUIET, precision=alias).precision == name


# -- 16-mixed: scaling, unscaling before on_before_optimizer_step, clipping after it ---------------------------


class LinearRegression(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.layer.weight.copy_(torch.tensor([[0.5, -1.0, 2.0, 0.25]]))
            self.layer.bias.fill_(0.1)
        self.matmul_dtypes: set[torch.dtype] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.layer(x)
        self.matmul_dtypes.add(out.dtype)
        return ((out.squeeze(1).float() - y) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1.0)


class GradSpy:
    def __init__(self) -> None:
        self.after_backward: list[torch.Tensor] = []
        self.before_step: list[torch.Tensor] = []
        self.params_before_step: list[torch.Tensor] = []
        self.scale: list[float] = []

    @staticmethod
    def flat(module: Any, what: str) -> torch.Tensor:
        return torch.cat([getattr(p, what).detach().reshape(-1).clone() for p in module.parameters()])

    def on_after_backward(self, trainer: ember.Trainer, module: Any) -> None:
        self.after_backward.append(self.flat(module, "grad"))
        scaler = getattr(trainer.role_plugins["precision"], "scaler", None)
        self.scale.append(scaler.get_scale() if scaler is not None else 1.0)

    def on_before_optimizer_step(self, module: Any) -> None:
        self.before_step.append(self.flat(module, "grad"))
        self.params_before_step.append(self.flat(module, "data"))


def regression_data() -> DataLoader:
    """Small values, so that the first step's scaled float16 gradients (scale 2**16) do not overflow."""
    g = torch.Generator().manual_seed(0)
    x = 0.1 * torch.randn(4, 4, generator=g)
    return DataLoader(TensorDataset(x, 0.1 * torch.randn(4, generator=g)), batch_size=4)


def true_grads(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of the first step, computed plainly under the same float16 autocast without scaling."""
    model = LinearRegression()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model.training_step((x, y), 0)
    loss.backward()
    return GradSpy.flat(model, "grad")


def test_16_mixed_unscales_before_on_before_optimizer_step_and_clips_after_it() -> None:
    loader = regression_data()
    x, y = loader.dataset.tensors
    expected = true_grads(x, y)
    spy = GradSpy()
    clip = 0.001
    model = LinearRegression()
    trainer = ember.Trainer(**QUIET, precision="16-mixed", max_epochs=1, gradient_clip_val=clip, callbacks=[spy])
    trainer.fit(model, loader)

    assert model.matmul_dtypes == {torch.float16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # on_after_backward: gradients still carry the scaler's factor
    assert spy.scale[0] == 2.0**16
    assert torch.isfinite(spy.after_backward[0]).all()  # so the step was taken, not skipped
    torch.testing.assert_close(spy.after_backward[0], expected * spy.scale[0], rtol=1e-3, atol=0.0)
    # on_before_optimizer_step: unscaled (the true gradients) and not yet clipped
    torch.testing.assert_close(spy.before_step[0], expected, rtol=1e-3, atol=1e-6)
    assert expected.norm() > 10 * clip
    # the step used the clipped gradients: with SGD(lr=1) the update is exactly the clipped gradient
    # (float32 weights near 1 resolve an update to about 1e-7)
    update = spy.params_before_step[0] - GradSpy.flat(model, "data")
    clipped = spy.before_step[0] * (clip / spy.before_step[0].norm())
    torch.testing.assert_close(update, clipped, rtol=0.0, atol=1e-6)
    assert abs(update.norm().item() - clip) < 1e-5


def test_16_mixed_gradient_clipping_by_value() -> None:
    spy = GradSpy()
    model = LinearRegression()
    trainer = ember.Trainer(**QUIET, precision="16-mixed", max_epochs=1, gradient_clip_val=0.005,
                            gradient_clip_algorithm="value", callbacks=[spy])
    trainer.fit(model, regression_data())
    update = spy.params_before_step[0] - GradSpy.flat(model, "data")
    grads = spy.before_step[0]
    assert grads.abs().max() > 0.005
    torch.testing.assert_close(update, grads.clamp(-0.005, 0.005), rtol=1e-3, atol=1e-6)


def test_16_mixed_skips_the_step_on_inf_gradients_and_lowers_the_scale() -> None:
    class Overflows(LinearRegression):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).float().sum() * torch.tensor(float("inf"))

    model = Overflows()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = ember.Trainer(**QUIET, precision="16-mixed", max_epochs=1)
    with pytest.warns(NonFiniteLossWarning, match="infinite"):  # the loss check's look at the last loss
        trainer.fit(model, regression_data())
    scaler = trainer.role_plugins["precision"].scaler
    assert scaler.get_scale() < 65536.0
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, b)
