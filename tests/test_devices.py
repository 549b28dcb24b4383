"""Accelerators. Tests about device behaviour run on every accelerator (parametrized): the CPU always, CUDA and
MPS where that hardware is present (they skip cleanly elsewhere)."""

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
CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, needs_cuda])
#: Every accelerator a device test runs on; the ones that are not present skip.
ACCELERATORS = ["cpu", CUDA, pytest.param("mps", marks=[pytest.mark.mps, needs_mps])]


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
    """Two epochs; ``kwargs`` override any default (the accelerator has none here: each test names it)."""
    trainer = ember.Trainer(**{**QUIET, "max_epochs": 2, "num_sanity_val_steps": 0, **kwargs})
    trainer.fit(model, loader(), DataLoader(tiny_dataset(n=16), batch_size=8))
    return trainer


def changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], v.detach().cpu().to(before[k].dtype)) for k, v in model.state_dict().items())


# -- every accelerator --------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the choice made without a GPU")
def test_auto_picks_the_cpu_without_a_gpu() -> None:
    trainer = ember.Trainer(**QUIET, accelerator="auto")
    assert trainer.role_identities["accelerator"] == "accelerator.cpu"


@pytest.mark.cuda
@needs_cuda
def test_auto_picks_cuda_when_a_gpu_is_there() -> None:
    trainer = ember.Trainer(**QUIET, accelerator="auto")
    assert trainer.role_identities["accelerator"] == "accelerator.cuda"
    assert trainer.root_device == torch.device("cuda", 0)


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_the_accelerator_trains_validates_and_predicts_on_its_device(accelerator: str) -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = fit(model, accelerator=accelerator)
    assert trainer.role_identities["accelerator"] == f"accelerator.{accelerator}"
    assert trainer.root_device.type == accelerator
    assert model.batch_devices == {accelerator} and model.param_devices == {accelerator}
    # as Lightning: a run leaves the module and the optimizers' state on the CPU (the next run moves them back)
    assert model.device.type == "cpu" and all(p.device.type == "cpu" for p in model.parameters())
    assert all(t.device.type == "cpu" for opt in trainer.optimizers for state in opt.state.values()
               for t in state.values() if isinstance(t, torch.Tensor))
    assert model(torch.randn(2, 8)).device.type == "cpu"
    assert changed(model, before)
    out = trainer.validate(model, DataLoader(tiny_dataset(n=16), batch_size=8), verbose=False)
    assert 0.0 <= out[0]["val_acc"] <= 1.0
    predictions = trainer.predict(model, DataLoader(tiny_dataset(n=16), batch_size=8))
    assert len(predictions) == 2 and all(p.device.type == accelerator for p in predictions)


@pytest.mark.parametrize("accelerator", ["cpu", CUDA])
def test_bf16_mixed_runs_matmuls_in_bfloat16_with_float32_weights(accelerator: str) -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, accelerator=accelerator, precision="bf16-mixed")
    assert model.matmul_dtypes == {torch.bfloat16}
    assert model.param_dtypes == {torch.float32} and model.batch_devices == {accelerator}
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())  # left on the CPU
    assert changed(model, before)
    assert not torch.is_autocast_enabled(accelerator)


@pytest.mark.parametrize("accelerator", ["cpu", CUDA])
def test_bf16_true_keeps_weights_and_inputs_in_bfloat16(accelerator: str) -> None:
    model = Where()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, accelerator=accelerator, precision="bf16-true")
    assert model.param_dtypes == {torch.bfloat16} and model.matmul_dtypes == {torch.bfloat16}
    assert model.batch_devices == model.param_devices == {accelerator}
    assert changed(model, before)
    assert torch.get_default_dtype() == torch.float32  # put back after the run


@pytest.mark.parametrize(("devices", "local_rank", "index"), [("auto", 0, 0), ("auto", 3, 3), ([2, 5], 1, 5),
                                                              ("1,4", 0, 1), ([7], 0, 7)])
def test_the_device_index_of_a_process(devices: Any, local_rank: int, index: int) -> None:
    from ember.plugins.accelerators import device_index

    trainer = SimpleNamespace(config=SimpleNamespace(devices=devices), local_rank=local_rank)
    assert device_index(trainer) == index


# -- CUDA only -----------------------------------------------------------------------------------------------------


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


class SeesBatches(Where):
    """Keeps a CPU copy of every training batch, as the step saw it on the device."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].cpu())
        return super().training_step(batch, batch_idx)


@pytest.mark.cuda
@needs_cuda
def test_pinned_batches_are_copied_to_the_gpu_without_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    data = tiny_dataset(n=64)
    copies: list[tuple[bool, bool]] = []
    to = torch.Tensor.to

    def spying_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.device.type == "cpu" and self.is_pinned():
            copies.append((kwargs.get("non_blocking", False), torch.device(args[0] if args else "cpu").type == "cuda"))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spying_to)
    model = SeesBatches()
    trainer = ember.Trainer(**QUIET, accelerator="cuda", max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(data, batch_size=8, pin_memory=True))
    monkeypatch.undo()
    assert model.batch_devices == {"cuda"}
    assert len(copies) >= 16 and all(non_blocking and to_gpu for non_blocking, to_gpu in copies)
    # the asynchronous copies arrived whole: every step saw exactly the rows of its batch
    torch.testing.assert_close(torch.cat(model.seen), data.tensors[0], rtol=0, atol=0)


@pytest.mark.cuda
@needs_cuda
def test_a_checkpoint_saved_on_the_gpu_loads_and_resumes_on_the_cpu(tmp_path: Any) -> None:
    from ember.plugins.checkpoint_io.torch_file import safe_load

    model = Where()
    trainer = ember.Trainer(**{**QUIET, "accelerator": "cuda", "max_epochs": 2, "num_sanity_val_steps": 0,
                               "default_root_dir": str(tmp_path)})
    trainer.fit(model, loader())
    path = trainer.checkpoint_callback.last_model_path or trainer.checkpoint_callback.best_model_path
    assert path, "the default checkpoint callback wrote no file"
    trained = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    assert safe_load(path)["state_dict"].keys() == trained.keys()

    loaded = Where.load_from_checkpoint(path)
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trained[key], rtol=0, atol=0)

    resumed = Where()
    on_cpu = ember.Trainer(**{**QUIET, "accelerator": "cpu", "max_epochs": 3, "num_sanity_val_steps": 0,
                              "default_root_dir": str(tmp_path / "cpu")})
    on_cpu.fit(resumed, loader(), ckpt_path=path)
    assert on_cpu.current_epoch == 3 and resumed.param_devices == {"cpu"}
    states = [s for opt in on_cpu.optimizers for s in opt.state.values()]
    assert all(t.device.type == "cpu" for s in states for t in s.values() if isinstance(t, torch.Tensor))


@pytest.mark.cuda
@needs_cuda
def test_sanity_check_leaves_the_cuda_random_state_untouched() -> None:
    torch.cuda.manual_seed(7)
    state = torch.cuda.get_rng_state()
    checked: list[bool] = []

    class DrawsOnGpu(Where):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            torch.rand(3, device="cuda")

    class Check:
        def on_train_start(self) -> None:
            checked.append(torch.equal(torch.cuda.get_rng_state(), state))

    fit(DrawsOnGpu(), accelerator="cuda", num_sanity_val_steps=1, callbacks=[Check()], max_steps=1)
    assert checked == [True]


def test_root_device_is_known_once_the_trainer_is_built() -> None:
    """As Lightning's ``trainer.root_device``: the selected accelerator's answer before any run."""

    class IndexedCPU:
        role = "accelerator"
        identity = "accelerator.indexed-cpu"

        @ember.hookimpl
        def root_device(self, trainer: Any) -> torch.device:
            return torch.device("cpu", trainer.local_rank)

    trainer = ember.Trainer(**QUIET, accelerator=IndexedCPU())
    assert trainer.root_device == torch.device("cpu", 0)
    assert ember.Trainer(**QUIET, accelerator="cpu").root_device == torch.device("cpu")
