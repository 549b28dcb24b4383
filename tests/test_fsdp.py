"""strategy.fsdp (FSDP2, fully_shard) on real gloo process groups on the CPU: a 2-process job checked against
one-process training, bf16 mixed precision, a sharded checkpoint saved, resumed and consolidated, and a
model too large for one device built on the meta device."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_support import SCRIPTS, load_script, needs_fsdp, once_per_session, run

import ember
from ember.cli import main as ember_cli

pytestmark = needs_fsdp


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in this process write their logs and checkpoints under the test's own directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def fsdp_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Any]:
    out = once_per_session(tmp_path_factory, "fsdp", lambda out: run([sys.executable, str(SCRIPTS / "fsdp_job.py"),
                                                                       str(out)], cwd=out, timeout=180))
    return json.loads((out / "result.json").read_text()), torch.load(out / "weights.pt", weights_only=True), out


def _close(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=atol, msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.slow
def test_fully_shard_on_the_root_and_the_blocks(fsdp_job: tuple) -> None:
    result, _, _ = fsdp_job
    assert result["sharded"] == ["<root>", "layers.0", "layers.1"]
    assert result["param_types"] == ["DTensor"]
    assert result["local_rows"] == 8  # Linear(8, 16): 16 rows, half on each rank


@pytest.mark.slow
def test_two_sharded_processes_train_the_same_weights_as_one(fsdp_job: tuple) -> None:
    _, weights, _ = fsdp_job
    job = load_script("fsdp_job.py")
    model, trainer = job.fit(8, accumulate_grad_batches=2, strategy="single_device")
    assert trainer.global_step == 8
    _close(weights["fp32"], model.state_dict(), atol=1e-6)


@pytest.mark.slow
def test_bf16_mixed_computes_with_bfloat16_parameters_and_stays_close(fsdp_job: tuple) -> None:
    result, weights, _ = fsdp_job
    assert result["forward_dtypes_fp32"] == ["torch.float32"]
    assert result["forward_dtypes_bf16"] == ["torch.bfloat16"]  # MixedPrecisionPolicy(param_dtype=bf16)
    assert all(v.dtype == torch.float32 for v in weights["bf16"].values())  # the sharded master weights
    job = load_script("fsdp_job.py")
    model, _ = job.fit(8, precision="bf16-mixed", strategy="single_device")  # autocast in one process
    _close(weights["bf16"], model.state_dict(), atol=1e-2)


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_to_the_same_weights(fsdp_job: tuple) -> None:
    result, weights, out = fsdp_job
    assert (out / "ckpt" / ".metadata").is_file()
    assert sorted(p.name for p in (out / "ckpt").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert result["resumed_meta"] == 4  # the loop state saved next to the shards
    _close(weights["resumed"], weights["fp32"], atol=1e-6)  # model and optimizer (momentum) restored


@pytest.mark.slow
def test_consolidated_checkpoint_resumes_in_one_process(fsdp_job: tuple, capsys: pytest.CaptureFixture) -> None:
    _, weights, out = fsdp_job
    target = out / "consolidated.ckpt"
    assert ember_cli(["consolidate", str(out / "ckpt"), str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    checkpoint = torch.load(target, weights_only=True)
    assert checkpoint["global_step"] == 4 and checkpoint["epoch"] == 0
    assert all(not hasattr(v, "to_local") for v in checkpoint["state_dict"].values())
    assert checkpoint["state_dict"]["inp.weight"].shape == (16, 8)
    assert set(checkpoint["optimizer_states"][0]["state"]) == set(range(8))  # positions, like Optimizer.state_dict()

    class Restore:
        def on_train_start(self, trainer: Any, module: Any) -> None:
            module.load_state_dict(checkpoint["state_dict"])
            trainer.optimizers[0].load_state_dict(checkpoint["optimizer_states"][0])

    job = load_script("fsdp_job.py")
    model, _ = job.fit(8, max_epochs=1, accumulate_grad_batches=2, callbacks=(Restore(),), strategy="single_device")
    _close(model.state_dict(), weights["fp32"], atol=1e-6)


@pytest.mark.slow
def test_a_model_built_in_configure_model_starts_on_meta_and_is_initialised_shard_by_shard(fsdp_job: tuple) -> None:
    result, _, _ = fsdp_job
    assert result["late_built_on"] == "meta"
    assert result["late_param_types"] == ["DTensor"]
    assert result["late_shard_is_mine"]
    assert result["late_shards_differ"]  # each rank drew its shard from its own stream, not a copy
    assert result["late_init_std"] == pytest.approx(8 ** -0.5 / 3 ** 0.5, rel=0.2)  # Linear's own init
    assert result["late_loss"] < 1.0


def test_consolidate_rejects_what_is_not_a_sharded_checkpoint(tmp_path: Any, capsys: pytest.CaptureFixture) -> None:
    assert ember_cli(["consolidate", str(tmp_path), str(tmp_path / "out.ckpt")]) == 1
    assert "not a sharded checkpoint directory" in capsys.readouterr().err


def test_meta_built_layers_without_reset_parameters_are_refused() -> None:
    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.weight

    class Late(ember.Module):
        def configure_model(self) -> None:
            self.scale = Scale()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.scale(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = ember.Trainer(accelerator="cpu", strategy="fsdp", devices=1, max_epochs=1, num_sanity_val_steps=0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 4)), batch_size=2)
    with pytest.raises(ember.ConfigurationError, match="Scale on the meta device.*reset_parameters"):
        trainer.fit(Late(), data)



@pytest.mark.slow
def test_the_fits_own_checkpoints_are_sharded_written_in_the_background_and_hold_the_final_weights(
        fsdp_job: tuple, tmp_path: Any) -> None:
    from ember.plugins.strategies import sharded_checkpoint

    _, weights, out = fsdp_job
    folder = out / "ember_logs" / "version_0" / "checkpoints"  # the first fit's ModelCheckpoint: 2 epochs of 4 steps
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=1-step=8.ckpt", "last.ckpt"]  # epoch 0's removed
    for name in ("epoch=1-step=8.ckpt", "last.ckpt"):  # each written by both processes: no links between them
        assert sharded_checkpoint.is_sharded(folder / name)
        whole = torch.load(sharded_checkpoint.consolidate(folder / name, tmp_path / f"{name}.whole"),
                           weights_only=True)
        assert whole["global_step"] == 8
        _close(whole["state_dict"], weights["fp32"], atol=0)  # the shards of that moment, copied exactly


def _remove_on_rank(rank: int, store: str, folder: str, results: Any) -> None:
    import datetime
    import time

    import torch.distributed as dist

    from ember.plugins.strategies import sharded_checkpoint

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=20))
    try:
        if rank == 1:
            time.sleep(0.5)  # rank 0 has deleted the folder by the time rank 1 comes to it
        removed = sharded_checkpoint.remove(folder, rank)
        after: list[Any] = [None, None]
        dist.all_gather_object(after, ("next collective", rank))  # must pair with the same call on rank 0
        results.put((rank, removed, after))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results.put((rank, repr(exc), None))
    finally:
        dist.destroy_process_group()


def test_removing_a_sharded_checkpoint_keeps_the_ranks_in_step(tmp_path: Path) -> None:
    """Every rank takes rank 0's word that the folder is a sharded checkpoint: a late rank that looked for itself
    would find it already deleted, skip the wait, and pair its next collective with rank 0's barrier."""
    import multiprocessing

    from ember.plugins.strategies import sharded_checkpoint

    folder = str(tmp_path / "epoch=0-step=4.ckpt")
    sharded_checkpoint.save({"format_version": 2}, folder, torch.nn.Linear(2, 2), [])
    assert sharded_checkpoint.is_sharded(folder)
    ctx = multiprocessing.get_context("fork")  # each rank starts with torch imported
    results = ctx.Queue()
    procs = [ctx.Process(target=_remove_on_rank, args=(rank, str(tmp_path / "store"), folder, results))
             for rank in range(2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    expected = [("next collective", 0), ("next collective", 1)]
    assert got == [(0, True, expected), (1, True, expected)]
    assert not Path(folder).exists()
