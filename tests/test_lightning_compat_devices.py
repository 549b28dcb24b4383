"""Device selection as code written for Lightning sees it: GPUs faked by patching Lightning's device counts
(``lightning.fabric.accelerators.cuda.num_cuda_devices``, ``.mps``'s), the accelerator and strategy modules by
Lightning's paths, and a strategy's ``on_exception``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import ember
import ember.lightning.pytorch as pl
from ember.lightning.fabric.accelerators import cuda as fabric_cuda
from ember.lightning.fabric.accelerators import mps as fabric_mps
from ember.lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator, MPSAccelerator
from ember.lightning.pytorch.accelerators import cuda as pytorch_cuda
from ember.lightning.pytorch.demos.boring_classes import BoringModel
from ember.lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, Strategy
from ember.plugins._shared import devices

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens where no GPU is visible")


@pytest.fixture(autouse=True)
def _routes_put_back() -> Iterator[None]:
    """Taking ``pl.Trainer`` routes device counts for the whole process: each test leaves them as it found them."""
    before = {kind: devices.count_devices_with(kind, None) for kind in devices.KINDS}
    for kind, counter in before.items():
        devices.count_devices_with(kind, counter)
    yield
    for kind, counter in before.items():
        devices.count_devices_with(kind, counter)


def fake_cuda(monkeypatch: pytest.MonkeyPatch, n: int, where: tuple[Any, ...] = (fabric_cuda, pytorch_cuda)) -> None:
    for module in where:
        monkeypatch.setattr(module, "num_cuda_devices", lambda: n)


@pytest.mark.parametrize(("kwargs", "device_ids", "strategy"), [
    ({"accelerator": "cuda", "devices": 1}, [0], SingleDeviceStrategy),
    ({"accelerator": "gpu", "devices": 1}, [0], SingleDeviceStrategy),
    ({"accelerator": "cuda", "devices": 2}, [0, 1], DDPStrategy),
    ({"accelerator": "cuda", "devices": "2"}, [0, 1], DDPStrategy),
    ({"accelerator": "cuda", "devices": [2]}, [2], SingleDeviceStrategy),
    ({"accelerator": "cuda", "devices": "2,"}, [2], SingleDeviceStrategy),
    ({"accelerator": "cuda", "devices": [0, 2]}, [0, 2], DDPStrategy),
    ({"accelerator": "cuda", "devices": "0, 2"}, [0, 2], DDPStrategy),
    ({"accelerator": "cuda", "devices": 2, "strategy": "ddp_spawn", "num_nodes": 2}, [0, 1], DDPStrategy),
])
def test_a_faked_gpu_count_builds_a_cuda_trainer(monkeypatch: pytest.MonkeyPatch, kwargs: dict, device_ids: list[int],
                                                 strategy: type) -> None:
    fake_cuda(monkeypatch, 4)
    trainer = pl.Trainer(**kwargs, **QUIET)
    assert trainer.device_ids == device_ids
    assert trainer.num_devices == len(device_ids)
    assert trainer.num_nodes == kwargs.get("num_nodes", 1)
    assert isinstance(trainer.accelerator, CUDAAccelerator) and not isinstance(trainer.accelerator, CPUAccelerator)
    assert isinstance(trainer.strategy, strategy)
    if not torch.cuda.is_available():
        assert not torch.cuda.is_initialized()


@pytest.mark.parametrize("patched", ["fabric", "pytorch"])
def test_either_of_lightnings_counts_is_heard(monkeypatch: pytest.MonkeyPatch, patched: str) -> None:
    fake_cuda(monkeypatch, 3, (fabric_cuda,) if patched == "fabric" else (pytorch_cuda,))
    trainer = pl.Trainer(accelerator="cuda", devices=3, **QUIET)
    assert trainer.device_ids == [0, 1, 2]
    assert CUDAAccelerator.is_available() and CUDAAccelerator.auto_device_count() == 3
    assert fabric_cuda.is_cuda_available() is (patched == "fabric" or torch.cuda.is_available())


@pytest.mark.parametrize("devices_arg", [3, [5], "0,4"])
def test_more_devices_than_counted_is_an_error(monkeypatch: pytest.MonkeyPatch, devices_arg: Any) -> None:
    fake_cuda(monkeypatch, 2)
    with pytest.raises(ember.ConfigurationError, match=r"devices=.*asks for CUDA devices .* this machine has 2"):
        pl.Trainer(accelerator="cuda", devices=devices_arg, **QUIET)


def test_a_count_of_zero_means_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, 0)
    with pytest.raises(ember.ConfigurationError, match="no CUDA device is available"):
        pl.Trainer(accelerator="cuda", devices=1, **QUIET)
    assert isinstance(pl.Trainer(accelerator="auto", **QUIET).accelerator, CPUAccelerator | MPSAccelerator)
    with pytest.raises(ValueError, match="no CUDA device is visible"):
        fabric_cuda.find_usable_cuda_devices(1)


@no_gpu
def test_auto_picks_a_faked_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, 1)
    trainer = pl.Trainer(**QUIET)
    assert isinstance(trainer.accelerator, CUDAAccelerator) and trainer.device_ids == [0]


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="checks a faked MPS device")
def test_a_faked_mps_device(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ember.ConfigurationError, match="no MPS device"):
        pl.Trainer(accelerator="mps", **QUIET)
    monkeypatch.setattr(fabric_mps.MPSAccelerator, "is_available", lambda *_: True)
    assert fabric_mps._get_all_available_mps_gpus() == [0]
    trainer = pl.Trainer(accelerator="mps", devices=1, **QUIET)
    assert isinstance(trainer.accelerator, MPSAccelerator) and trainer.device_ids == [0]
    monkeypatch.setattr(fabric_mps, "_get_all_available_mps_gpus", lambda: [])
    with pytest.raises(ember.ConfigurationError, match="no MPS device"):
        pl.Trainer(accelerator="mps", **QUIET)


@no_gpu
@pytest.mark.parametrize("devices_arg", [1, 2])
def test_fitting_on_a_faked_gpu_says_why_it_cannot(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                   devices_arg: int) -> None:
    fake_cuda(monkeypatch, 2)
    trainer = pl.Trainer(accelerator="cuda", devices=devices_arg, default_root_dir=tmp_path, max_steps=1, **QUIET)
    with pytest.raises(ember.ConfigurationError, match=r"torch sees none in this process.*accelerator='cpu'"):
        trainer.fit(BoringModel())
    assert not torch.cuda.is_initialized()


@no_gpu
def test_embers_own_trainer_counts_with_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, 2)
    for kind in devices.KINDS:  # as in a process that never took Lightning's Trainer (put back after the test)
        devices.count_devices_with(kind, None)
    with pytest.raises(ember.ConfigurationError, match="no CUDA device is available"):
        ember.Trainer(accelerator="cuda", **QUIET)


def test_strategy_modules_by_lightnings_paths() -> None:
    from ember.lightning.pytorch.strategies import FSDPStrategy, ParallelStrategy
    from ember.lightning.pytorch.strategies.ddp import DDPStrategy as ByDDP
    from ember.lightning.pytorch.strategies.fsdp import FSDPStrategy as ByFSDP
    from ember.lightning.pytorch.strategies.parallel import ParallelStrategy as ByParallel
    from ember.lightning.pytorch.strategies.single_device import SingleDeviceStrategy as BySingle
    from ember.lightning.pytorch.strategies.strategy import Strategy as ByStrategy

    assert (ByDDP, ByFSDP, ByParallel, BySingle, ByStrategy) == (DDPStrategy, FSDPStrategy, ParallelStrategy,
                                                                  SingleDeviceStrategy, Strategy)
    assert pl.strategies.strategy.Strategy is Strategy and pl.accelerators.cuda.CUDAAccelerator is CUDAAccelerator
    import ember.lightning.fabric as fabric

    assert fabric.accelerators.cuda.CUDAAccelerator is CUDAAccelerator
    assert fabric.accelerators.mps.MPSAccelerator is MPSAccelerator


def test_a_strategys_on_exception_gets_the_exception(tmp_path: Any) -> None:
    seen: list[BaseException] = []

    class Recording(SingleDeviceStrategy):
        def on_exception(self, exception: BaseException) -> None:
            seen.append(exception)

    class Failing(BoringModel):
        def on_fit_start(self) -> None:
            raise RuntimeError("in on_fit_start")

    trainer = pl.Trainer(strategy=Recording(), accelerator="cpu", default_root_dir=tmp_path, max_steps=1, **QUIET)
    with pytest.raises(RuntimeError, match="in on_fit_start"):
        trainer.fit(Failing())
    assert [str(e) for e in seen] == ["in on_fit_start"]


@pytest.mark.parametrize(("strategy", "distributed"), [
    ("auto", False), ("ddp", True), (lambda: DDPStrategy(), True), (lambda: SingleDeviceStrategy(), False)])
def test_accelerator_connector_reads_the_roles(strategy: Any, distributed: bool) -> None:
    trainer = pl.Trainer(strategy=strategy() if callable(strategy) else strategy, accelerator="cpu", devices=1,
                         **QUIET)
    connector = trainer._accelerator_connector
    assert connector.is_distributed is distributed
    assert connector.strategy is trainer.strategy and connector.accelerator is trainer.accelerator
    assert connector.precision_plugin is trainer.precision_plugin
    with pytest.raises(AttributeError, match="cannot be set.*strategy="):
        connector.strategy = SingleDeviceStrategy()


@pytest.mark.parametrize(("count", "strategy"), [(4, DDPStrategy), (1, SingleDeviceStrategy)])
@pytest.mark.parametrize("every", [-1, "-1"])
def test_devices_minus_one_asks_for_every_gpu(monkeypatch: pytest.MonkeyPatch, count: int, strategy: type,
                                              every: Any) -> None:
    fake_cuda(monkeypatch, count)
    trainer = pl.Trainer(accelerator="gpu", devices=every, **QUIET)
    assert isinstance(trainer.strategy, strategy) and isinstance(trainer.accelerator, CUDAAccelerator)
    assert trainer.num_devices == count and trainer.device_ids == list(range(count))
    assert not isinstance(pl.Trainer(accelerator="cuda", **QUIET).strategy, DDPStrategy)  # "auto": one process


def test_devices_minus_one_on_the_cpu_is_its_one_device() -> None:
    trainer = ember.Trainer(accelerator="cpu", devices=-1, **QUIET)
    assert trainer.role_identities["strategy"] == "strategy.single_device" and trainer.num_devices == 1


def test_a_named_ddp_under_auto_devices_counts_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cuda(monkeypatch, 3)
    trainer = pl.Trainer(accelerator="cuda", strategy="ddp", **QUIET)  # the processes its launch would start
    assert trainer.num_devices == 3 and trainer.device_ids == [0, 1, 2]
    assert ember.Trainer(accelerator="cpu", strategy="ddp", **QUIET).num_devices == 1
