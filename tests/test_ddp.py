"""strategy.ddp on real gloo process groups: a 2-process job launched by ember itself from a plain script,
checked against the same training in one process with the global batch size."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, load_script, once_per_session, run

import ember


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in this process write their logs and checkpoints under the test's own directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict[str, dict]]:
    """Run tests/multiprocess/ddp_job.py once (it starts 2 processes itself); the per-rank results and rank 0's weights."""
    out = once_per_session(tmp_path_factory, "ddp", lambda out: run([sys.executable, str(SCRIPTS / "ddp_job.py"),
                                                                     str(out)], cwd=out, timeout=150))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    weights = {name: torch.load(out / f"{name}.pt", weights_only=True) for name in ("plain", "accumulate")}
    return ranks, weights


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.slow
def test_the_plain_script_started_two_ddp_processes(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["world_size"] == 2 and r["backend"] == "gloo"
        assert r["model_type"] == "DistributedDataParallel"
        assert r["roles"]["strategy"] == "strategy.ddp"
        assert r["roles"]["environment"] == "environment.torchrun"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args"), [("plain", {}), ("accumulate", {"accumulate_grad_batches": 2})])
def test_two_processes_train_the_same_weights_as_one_on_the_global_batch(ddp_job: tuple, name: str, args: dict) -> None:
    _, weights = ddp_job
    job = load_script("ddp_job.py")
    model, trainer = job.fit(8, strategy="single_device", **args)  # 2 ranks x 4 = a global batch of 8
    assert trainer.global_step == (16 if not args else 8)
    _assert_same_weights(weights[name], model.state_dict())
    untrained = job.Model().state_dict()
    assert not torch.allclose(weights[name]["net.0.weight"], untrained["net.0.weight"])


@pytest.mark.slow
def test_accumulation_synchronises_gradients_once_per_optimizer_step(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    for r in ranks:  # one gradient bucket: one all-reduce per optimizer step, none for the no_sync micro-batches
        assert r["accumulate_steps"] == 8
        assert r["accumulate_allreduces"] == 8


@pytest.mark.slow
def test_each_rank_gets_its_share_of_the_data(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    seen = [r["seen"] for r in ranks]
    per_epoch = len(seen[0]) // 2
    for epoch in range(2):
        shares = [{i for batch in s[epoch * per_epoch:(epoch + 1) * per_epoch] for i in batch} for s in seen]
        assert not shares[0] & shares[1]
        assert shares[0] | shares[1] == set(range(64))
    assert seen[0][0] == [0, 2, 4, 6] and seen[1][0] == [1, 3, 5, 7]  # shuffle=False kept: in order


@pytest.mark.slow
def test_a_shuffled_loader_stays_shuffled_and_changes_order_each_epoch(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    seen = [r["shuffled_seen"] for r in ranks]
    epochs = [[[i for b in s[e * 8:(e + 1) * 8] for i in b] for e in range(2)] for s in seen]
    for epoch in range(2):
        assert sorted(epochs[0][epoch] + epochs[1][epoch]) == list(range(64))
    assert epochs[0][0] != sorted(epochs[0][0])
    assert epochs[0][0] != epochs[0][1]


@pytest.mark.slow
def test_sync_dist_logs_the_global_mean(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    job = load_script("ddp_job.py")
    _, single = job.fit(8, strategy="single_device")
    for r in ranks:
        assert r["metrics"]["rank_synced"] == pytest.approx(0.5)
        assert r["metrics"]["rank_local"] == r["rank"]  # without sync_dist each rank keeps its own
        assert r["metrics"]["rank_step"] == pytest.approx(0.5)  # a step value is reduced when it is logged
        assert r["metrics"]["train_loss"] == pytest.approx(float(single.callback_metrics["train_loss"]), abs=1e-6)


@pytest.mark.slow
def test_loggers_are_called_on_rank_zero_only(ddp_job: tuple) -> None:
    ranks, _ = ddp_job
    assert ranks[0]["log_metrics_calls"] == 16 + 2  # every step (log_every_n_steps=1) and every epoch end
    assert ranks[1]["log_metrics_calls"] == 0


@pytest.mark.slow
def test_collectives(ddp_job: tuple) -> None:
    for r in ddp_job[0]:
        assert r["reduce_sum"] == 3.0 and r["reduce_mean"] == 1.5 and r["reduce_max"] == 1.0
        assert r["gather"] == [[0, 10], [1, 11]]
        assert r["gather_grad"] == 2.0  # both ranks' sums depend on each rank's part
        assert r["broadcast"] == {"from": 1}
        assert r["broadcast_none"] is None  # a None sent by src is an answer, not "unanswered"
        assert r["any"] is True and r["all"] is False


def test_ddp_with_one_process_runs_in_this_process(tmp_path: object) -> None:
    import torch.distributed as dist

    job = load_script("ddp_job.py")
    model, trainer = job.fit(8, strategy="ddp", devices=1)
    assert trainer.world_size == 1 and dist.is_initialized() and dist.get_world_size() == 1
    assert type(trainer.model).__name__ == "DistributedDataParallel"
    reference, _ = job.fit(8, strategy="single_device")
    _assert_same_weights(model.state_dict(), reference.state_dict())


def test_auto_picks_ddp_for_several_devices_and_single_device_for_one() -> None:
    assert ember.Trainer(accelerator="cpu", devices=2).role_identities["strategy"] == "strategy.ddp"
    assert ember.Trainer(accelerator="cpu").role_identities["strategy"] == "strategy.single_device"
    assert ember.Trainer(accelerator="cpu", devices=2).role_identities["environment"] == "environment.local"


def test_launching_from_pytest_is_refused_with_a_way_out(tmp_path: object) -> None:
    job = load_script("ddp_job.py")
    with pytest.raises(ember.ConfigurationError, match="ember run --nproc-per-node"):
        job.fit(4, strategy="ddp", devices=2)
