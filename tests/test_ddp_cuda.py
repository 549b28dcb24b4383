"""strategy.ddp on CUDA with NCCL: the job of test_ddp.py on GPUs, against one-device CUDA training.

With one GPU the job is an NCCL process group of one process, run in the script's own process: the DDP
wrapper, NCCL collectives on CUDA tensors, ``no_sync`` under accumulation and ``sync_dist`` all run for real.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, load_script, run

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in this process write their logs and checkpoints under the test's own directory."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("devices", [1, 2])
def test_nccl_ddp_trains_the_same_weights_as_one_cuda_device(tmp_path: object, devices: int) -> None:
    if torch.cuda.device_count() < devices:
        pytest.skip(f"needs {devices} CUDA devices")
    run([sys.executable, str(SCRIPTS / "ddp_job.py"), str(tmp_path), "cuda", str(devices)], cwd=tmp_path, timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(devices)]
    n = devices
    for r in ranks:
        assert r["backend"] == "nccl" and r["world_size"] == n
        assert r["model_type"] == "DistributedDataParallel"
        assert r["param_device"] == f"cuda:{r['rank']}"
        assert r["roles"]["accelerator"] == "accelerator.cuda"
        assert r["accumulate_steps"] == 8 and r["accumulate_allreduces"] == 8  # no_sync on the other micro-batches
        assert r["metrics"]["rank_synced"] == pytest.approx(sum(range(n)) / n)
        assert r["reduce_sum"] == n * (n + 1) / 2 and r["reduce_max"] == n - 1
        assert r["gather"] == [[k, 10 + k] for k in range(n)] and r["gather_grad"] == n
        assert r["broadcast"] == {"from": n - 1} and r["broadcast_none"] is None
    job = load_script("ddp_job.py")
    for name, args in (("plain", {}), ("accumulate", {"accumulate_grad_batches": 2})):
        reference, _ = job.fit(8, strategy="single_device", accelerator="cuda", **args)
        weights = torch.load(tmp_path / f"{name}.pt", map_location="cpu", weights_only=True)
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(weights[key], value.cpu(), rtol=1e-4, atol=1e-5)
