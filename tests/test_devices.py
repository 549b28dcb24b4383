"""Accelerators. The CUDA and MPS tests run where that hardware is present and skip cleanly elsewhere."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False}

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_mps = pytest.mark.skipif(not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
                               reason="needs an Apple MPS device")


class Where(TinyClassifier):
    """Records where and in which dtype the step's tensors are."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_devices: set[str] = set()
        self.param_devices: set[str] = set()
        self.matmul_dtypes: set[torch.dtype] = set()
        self.param_dtypes: set[torch.dtype] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.batch_devices |= {x.device.type, y.device.type}
        self.param_devices |= {p.device.type for p in self.parameters()}
        self.param_dtypes |= {p.dtype for p in self.parameters()}
        self.matmul_dtypes.add(self.net[0](x).dtype)
        return super().training_step(batch, batch_idx)


def loader() -> DataLoader:
    return DataLoader(tiny_dataset(n=32), batch_size=8, shuffle=True)


def fit(model: Any, **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(**QUIET, max_epochs=2, num_sanity_val_steps=0, **kwargs)
    trainer.fit(model, loader(), DataLoader(tiny_dataset(n=16), batch_size=8))
    return trainer


def changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], v.detach().cpu().to(before[k].dtype)) for k, v in model.state_dict().items())


# -- everywhere ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the choice made without a GPU")
def test_auto_picks_the_cpu_without_a_gpu() -> None:
    trainer = ember.Trainer(**QUIET, accelerator="auto")
    assert trainer.role_identities["accelerator"] == "accelerator.cpu"


def test_cpu_accelerator_trains_on_the_cpu() -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fit(model, accelerator="cpu")
    assert trainer.root_device == torch.device("cpu")
    assert model.batch_devices == model.param_devices == {"cpu"}
    assert changed(model, before)


@pytest.mark.parametrize(("devices", "local_rank", "index"), [("auto", 0, 0), ("auto", 3, 3), ([2, 5], 1, 5),
                                                              ("1,4", 0, 1), ([7], 0, 7)])
def test_the_device_index_of_a_process(devices: Any, local_rank: int, index: int) -> None:
    from ember.plugins.accelerators import device_index

    trainer = SimpleNamespace(config=SimpleNamespace(devices=devices), local_rank=local_rank)
    assert device_index(trainer) == index


# -- CUDA ---------------------------------------------------------------------------------------------------------


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("accelerator", ["cuda", "auto"])
def test_cuda_accelerator_trains_with_batches_on_the_gpu(accelerator: str) -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fit(model, accelerator=accelerator)
    assert trainer.role_identities["accelerator"] == "accelerator.cuda"
    assert trainer.root_device == torch.device("cuda", 0)
    assert model.batch_devices == {"cuda"} and model.param_devices == {"cuda"}
    assert model.device.type == "cuda"
    assert changed(model, before)
    out = trainer.validate(model, DataLoader(tiny_dataset(n=16), batch_size=8), verbose=False)
    assert 0.0 <= out[0]["val_acc"] <= 1.0
    predictions = trainer.predict(model, DataLoader(tiny_dataset(n=16), batch_size=8))
    assert all(p.device.type == "cuda" for p in predictions)


class ScaleSpy:
    """Gradients right after backward (scaled) and before the step (unscaled), with the scale in use."""

    def __init__(self) -> None:
        self.records: list[tuple[float, torch.Tensor, torch.Tensor]] = []
        self._after: torch.Tensor | None = None

    @staticmethod
    def grads(module: Any) -> torch.Tensor:
        return torch.cat([p.grad.detach().float().reshape(-1) for p in module.parameters()])

    def on_after_backward(self, module: Any) -> None:
        self._after = self.grads(module).clone()

    def on_before_optimizer_step(self, trainer: ember.Trainer, module: Any) -> None:
        scaler = trainer.role_plugins["precision"].scaler
        self.records.append((scaler.get_scale(), self._after, self.grads(module).clone()))


@pytest.mark.cuda
@needs_cuda
def test_16_mixed_on_cuda_scales_with_a_grad_scaler() -> None:
    model = Where()
    spy = ScaleSpy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fit(model, accelerator="cuda", precision="16-mixed", callbacks=[spy])
    scaler = trainer.role_plugins["precision"].scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    assert model.matmul_dtypes == {torch.float16}
    assert model.param_dtypes == {torch.float32} and model.batch_devices == {"cuda"}
    assert changed(model, before)
    finite = [(s, a, b) for s, a, b in spy.records if torch.isfinite(a).all()]
    assert finite, "every step overflowed"
    scale, after_backward, before_step = finite[0]
    assert scale > 1.0
    torch.testing.assert_close(after_backward, before_step * scale, rtol=1e-3, atol=1e-6)


@pytest.mark.cuda
@needs_cuda
def test_bf16_mixed_on_cuda() -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, accelerator="cuda", precision="bf16-mixed")
    assert model.matmul_dtypes == {torch.bfloat16}
    assert model.param_dtypes == {torch.float32}
    assert model.batch_devices == {"cuda"}
    assert all(p.dtype == torch.float32 and p.device.type == "cuda" for p in model.parameters())
    assert changed(model, before)
    assert not torch.is_autocast_enabled("cuda")


@pytest.mark.cuda
@needs_cuda
def test_sanity_check_leaves_the_cuda_random_state_untouched() -> None:
    torch.cuda.manual_seed(7)
    state = torch.cuda.get_rng_state()

    class DrawsOnGpu(Where):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            torch.rand(3, device="cuda")

    class Check:
        def on_train_start(self) -> None:
            assert torch.equal(torch.cuda.get_rng_state(), state)

    fit(DrawsOnGpu(), accelerator="cuda", num_sanity_val_steps=1, callbacks=[Check()], max_steps=1)


# -- MPS ----------------------------------------------------------------------------------------------------------


@pytest.mark.mps
@needs_mps
def test_mps_accelerator_trains_with_batches_on_the_device() -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fit(model, accelerator="mps")
    assert trainer.root_device == torch.device("mps", 0)
    assert model.batch_devices == {"mps"} and model.param_devices == {"mps"}
    assert changed(model, before)
