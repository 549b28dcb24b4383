"""Lightning's Precision/Accelerator/Strategy classes as ember plugins (ember.lightning.seed), checked against
Lightning: recording subclasses run through the same fit on both (tests/lightning/seed_scenarios.py; the
fixture is written by tests/lightning/record_seed_classes.py)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent / "lightning"
FIXTURE = json.loads((HERE / "seed_classes.json").read_text())["recorded"]
#: Calls Lightning makes that ember does not, and why: Lightning's Trainer calls Strategy.barrier at five points
#: of its own setup and teardown, Strategy.broadcast for its log folder and Strategy.reduce("sum") of each loader's
#: length (its check that no rank has an empty loader); ember calls these hooks only where a plugin, callback or
#: the module asks (self.log(sync_dist=True), all_gather, ...), and with one process not at all.
NOT_CALLED_BY_EMBER = {"strategy.barrier", "strategy.broadcast", "strategy.reduce"}


def _device_first(calls: list) -> list:
    """Lightning calls Precision.convert_input on the host batch, then Strategy.batch_to_device; ember moves the
    batch first and converts it on the device."""
    out = list(calls)
    for i in range(len(out) - 1):
        if out[i][0] == "convert_input" and out[i + 1][0] == "strategy.batch_to_device":
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def _ember_calls() -> dict[str, list]:
    sys.path.insert(0, str(HERE))
    try:
        import seed_scenarios

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return seed_scenarios.record("ember.lightning.pytorch")
    finally:
        sys.path.remove(str(HERE))


@pytest.fixture(scope="module")
def ember_calls() -> dict[str, list]:
    return _ember_calls()


@pytest.mark.parametrize("scenario", sorted(FIXTURE))
def test_same_calls_as_lightning(ember_calls: dict[str, list], scenario: str) -> None:
    expected = [c for c in FIXTURE[scenario] if c[0] not in NOT_CALLED_BY_EMBER]
    # Lightning's Trainer calls batch_to_device(batch, dataloader_idx=...) and lets it default the device; ember
    # passes the run's device
    expected = [[c[0], "cpu", *c[2:]] if c[0] == "strategy.batch_to_device" and c[1] == "None" else c
                for c in expected]
    assert ember_calls[scenario] == _device_first(expected)


def test_importable_from_lightning_paths() -> None:
    from ember.lightning.pytorch import accelerators, plugins, strategies
    from ember.lightning.pytorch.plugins import io, precision

    for module, names in [(plugins, ["Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision", "CheckpointIO",
                                     "TorchCheckpointIO", "AsyncCheckpointIO"]),
                          (precision, ["Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision"]),
                          (io, ["CheckpointIO", "TorchCheckpointIO", "AsyncCheckpointIO"]),
                          (accelerators, ["Accelerator", "CPUAccelerator", "CUDAAccelerator"]),
                          (strategies, ["Strategy", "SingleDeviceStrategy", "DDPStrategy", "FSDPStrategy"])]:
        for name in names:
            assert isinstance(getattr(module, name), type), (module.__name__, name)


def test_builtins_configure_embers_plugins() -> None:
    from ember.lightning.pytorch.plugins import DoublePrecision, HalfPrecision, MixedPrecision
    from ember.lightning.pytorch.strategies import DDPStrategy
    from ember.plugins.strategies.ddp import DDPStrategy as EmberDDP

    assert MixedPrecision("bf16-mixed", "cpu").identity == "precision.bf16-mixed"
    mixed16 = MixedPrecision("16-mixed", "cpu")
    assert mixed16.identity == "precision.16-mixed" and isinstance(mixed16.scaler, torch.amp.GradScaler)
    assert HalfPrecision("bf16-true").identity == "precision.bf16-true"
    assert DoublePrecision().identity == "precision.64-true"
    ddp = DDPStrategy(find_unused_parameters=True)
    assert ddp.identity == "strategy.ddp" and isinstance(ddp.plugin, EmberDDP)
    assert ddp.plugin.ddp_kwargs == {"find_unused_parameters": True}
    with pytest.raises(Exception, match="find_unused_parameterz"):
        DDPStrategy(find_unused_parameterz=True)


def _fit(**trainer: object) -> tuple[object, torch.nn.Module]:
    from torch.utils.data import DataLoader, TensorDataset

    import ember.lightning.pytorch as pl

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
            assert batch[0].dtype == self.layer.weight.dtype
            return self.layer(batch[0]).float().pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    t = pl.Trainer(**{"max_steps": 2, "accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                      "enable_progress_bar": False, "enable_model_summary": False, **trainer})
    t.fit(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    return t, model


def test_double_precision_converts_module_and_inputs() -> None:
    from ember.lightning.pytorch.plugins import DoublePrecision

    trainer, model = _fit(plugins=[DoublePrecision()])
    assert model.layer.weight.dtype == torch.float64 and trainer.precision == "64-true"  # type: ignore[attr-defined]


def test_mixed16_scales_the_loss_and_keeps_scaler_state(tmp_path: Path) -> None:
    from ember.lightning.pytorch.plugins import MixedPrecision

    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    trainer, _ = _fit(plugins=[plugin])
    assert plugin.scaler is not None and plugin.scaler.get_scale() == 1024.0
    assert plugin.state_dict()["scale"] == 1024.0
    trainer.save_checkpoint(tmp_path / "a.ckpt")  # type: ignore[attr-defined]
    saved = torch.load(tmp_path / "a.ckpt", weights_only=True)
    assert saved["plugins"]["precision.16-mixed"]["scale"] == 1024.0


def test_an_override_replaces_exactly_its_part() -> None:
    from ember.lightning.pytorch.plugins import Precision

    losses = []

    class NoStep(Precision):
        def optimizer_step(self, optimizer: object, model: object, closure: object, **kwargs: object) -> None:
            losses.append(closure())  # type: ignore[operator]  # the step's loss; the optimizer is not stepped

    torch.manual_seed(0)
    start = torch.nn.Linear(4, 1).weight.detach().clone()
    torch.manual_seed(0)
    trainer, model = _fit(plugins=[NoStep()])
    assert len(losses) == 2 and all(isinstance(v, torch.Tensor) for v in losses)
    assert torch.equal(model.layer.weight.detach(), start)  # type: ignore[union-attr]
    assert trainer.global_step == 2  # type: ignore[attr-defined]


def test_checkpoint_io_subclass_writes_the_checkpoints(tmp_path: Path) -> None:
    from ember.lightning.pytorch.plugins import CheckpointIO

    written = []

    class Recording(CheckpointIO):
        def save_checkpoint(self, checkpoint: dict, path: object, storage_options: object = None) -> None:
            written.append(str(path))
            torch.save(checkpoint, str(path))

    trainer, _ = _fit(plugins=[Recording()])
    trainer.save_checkpoint(tmp_path / "b.ckpt")  # type: ignore[attr-defined]
    assert written == [str(tmp_path / "b.ckpt")] and (tmp_path / "b.ckpt").exists()


@pytest.mark.slow
def test_ddp_strategy_subclass_on_two_gloo_processes_as_on_lightning() -> None:
    """tests/lightning/seed_ddp.py: DDPStrategy(find_unused_parameters=True) subclassed to record reduce and barrier,
    2 CPU processes; the same weights, steps and synced loss as Lightning (tests/lightning/seed_ddp.json)."""
    sys.path.insert(0, str(HERE))
    try:
        import seed_ddp
    finally:
        sys.path.remove(str(HERE))
    expected = json.loads((HERE / "seed_ddp.json").read_text())["recorded"]
    from dist_support import clean_env

    env = clean_env(PYTHONPATH=str(HERE.parent.parent))  # not seen as a pytest session, which ember does not re-run
    got = seed_ddp.record("ember.lightning.pytorch", sys.executable, env, timeout=150)
    for ours, theirs in zip(got, expected, strict=True):
        assert [ours[k] for k in ("rank", "world_size", "global_step", "loss")] == \
            [theirs[k] for k in ("rank", "world_size", "global_step", "loss")]
        # the override answers ember's calls: one barrier (Lightning makes five of its own) and the reduce of the
        # sync_dist=True epoch value (Lightning reduces its sum and its sample count apart, and each loader's length)
        assert ours["calls"] == [["barrier"], ["reduce", "mean", theirs["loss"]]]
        assert ["reduce", "mean", 8.0] in theirs["calls"] and ["barrier"] in theirs["calls"]
    for key, value in expected[0]["weights"].items():
        torch.testing.assert_close(torch.tensor(got[0]["weights"][key]), torch.tensor(value), rtol=1e-5, atol=1e-6)


def test_cluster_environments_configure_embers_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.lightning.pytorch.plugins import (
        ClusterEnvironment,
        LightningEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )
    from ember.lightning.pytorch.plugins.environments import ClusterEnvironment as FromModule

    assert FromModule is ClusterEnvironment
    assert LightningEnvironment().identity == "environment.local"
    assert TorchElasticEnvironment().identity == "environment.torchrun" and not TorchElasticEnvironment.detect()
    slurm = SLURMEnvironment(auto_requeue=False)
    assert slurm.identity == "environment.slurm" and slurm.plugin.auto_requeue is False
    alone = LightningEnvironment()
    assert (alone.world_size(), alone.global_rank(), alone.creates_processes_externally) == (1, 0, False)

    trainer, _ = _fit(plugins=[LightningEnvironment()])
    assert trainer.role_identities["environment"] == "environment.local"  # type: ignore[attr-defined]

    # a SLURM task of one, with a port of the subclass's own
    for key, value in {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                       "SLURM_JOB_ID": "123", "SLURM_JOB_NODELIST": "node7"}.items():
        monkeypatch.setenv(key, value)

    class FixedPort(SLURMEnvironment):
        @property
        def main_port(self) -> int:
            return 29555

    env = FixedPort(auto_requeue=False)
    assert SLURMEnvironment.detect() and env.creates_processes_externally and env.main_address == "node7"
    info = env._ember_distributed_info()
    assert (info["main_port"], info["world_size"], info["global_rank"], info["launched"]) == (29555, 1, 0, True)
    import ember.lightning.pytorch as pl

    trainer = pl.Trainer(plugins=[FixedPort(auto_requeue=False)], logger=False)  # no fit: node7 does not exist
    assert trainer.role_identities["environment"] == "environment.slurm"


def test_a_cluster_environment_of_ones_own() -> None:
    from ember.lightning.pytorch.plugins import ClusterEnvironment

    class Mine(ClusterEnvironment):
        @property
        def creates_processes_externally(self) -> bool:
            return True

        @property
        def main_address(self) -> str:
            return "10.0.0.1"

        @property
        def main_port(self) -> int:
            return 1234

        def world_size(self) -> int:
            return 1

        def global_rank(self) -> int:
            return 0

    info = Mine()._ember_distributed_info()
    assert info == {"global_rank": 0, "local_rank": 0, "node_rank": 0, "world_size": 1, "local_world_size": 1,
                    "num_nodes": 1, "main_address": "10.0.0.1", "main_port": 1234, "launched": True}
    trainer, _ = _fit(plugins=[Mine()])
    assert trainer.role_identities["environment"] == "environment.Mine"  # type: ignore[attr-defined]
