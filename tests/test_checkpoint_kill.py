"""Kill anywhere, resume, and end bit for bit where an uninterrupted run ends.

Each case trains ``ckpt_job`` (shuffled data, random augmentation from torch/NumPy/Python, dropout, gradient
accumulation, a per-step scheduler, mid-epoch validation, two checkpoint callbacks) in a subprocess that
kills itself with SIGKILL at one point, resumes from ``last`` in this process, and compares the final module,
optimizer and scheduler state, and the files left in both checkpoint directories, with a run that never
stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import ckpt_job  # noqa: E402

JOB = str(Path(__file__).with_name("ckpt_job.py"))
pytestmark = pytest.mark.slow


def same(a: Any, b: Any) -> bool:
    """Bitwise equality of nested states."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def files(root: Path) -> tuple[list[str], list[str]]:
    return (sorted(os.listdir(root / "ckpt")), sorted(os.listdir(root / "best")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    runs = {}
    for precision in ("32-true", "bf16-mixed"):
        root = tmp_path_factory.mktemp(f"ref-{precision}")
        runs[precision] = {**ckpt_job.run(str(root), precision), "root": root}
    return runs


def run_job(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, JOB, str(out), *args], capture_output=True, text=True, timeout=120,
                          env=env)


# (where, at): "batch" kills before the at-th batch of the run (counted over epochs), "after-save" right after
# the at-th file write completes, "during-save" halfway through writing the at-th file. The run writes 8 files
# with save_checkpoint, on the background writer (last.ckpt is mostly a link to a file of the same moment).
CASES = [
    pytest.param("32-true", "batch", 13, id="fp32-mid-epoch", marks=pytest.mark.extended),
    pytest.param("32-true", "after-save", 3, id="fp32-right-after-save", marks=pytest.mark.extended),
    pytest.param("32-true", "during-save", 6, id="fp32-during-save"),
    pytest.param("bf16-mixed", "batch", 19, id="bf16-mid-epoch"),
    pytest.param("bf16-mixed", "after-save", 7, id="bf16-right-after-save", marks=pytest.mark.extended),
    pytest.param("bf16-mixed", "during-save", 4, id="bf16-during-save", marks=pytest.mark.extended),
]


@pytest.mark.parametrize(("precision", "kill", "at"), CASES)
def test_sigkill_then_resume_is_bitwise_exact(reference: dict, tmp_path: Path, precision: str, kill: str,
                                              at: int) -> None:
    killed = run_job(tmp_path, "--precision", precision, "--kill", kill, "--at", str(at))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert os.path.exists(tmp_path / "ckpt" / "last.ckpt")
    resumed = ckpt_job.run(str(tmp_path), precision, resume=True)
    ref = reference[precision]
    assert resumed["trainer"].global_step == ref["trainer"].global_step == 12
    assert same(resumed["module"], ref["module"])
    assert same(resumed["optimizer"], ref["optimizer"])
    assert same(resumed["scheduler"], ref["scheduler"])
    # Consumed batches are skipped, not loaded again: the resumed run loaded fewer items than the whole run.
    assert resumed["loaded"] < ref["loaded"]
    # The checkpoint directories end as the uninterrupted run left them (no orphans, no half-written files).
    assert files(tmp_path) == files(ref["root"])
    assert set(map(os.path.basename, resumed["best"])) == set(map(os.path.basename, ref["best"]))


@pytest.mark.parametrize(("writer", "nth"), [pytest.param("thread", 4, marks=pytest.mark.extended),
                                          pytest.param("thread", 6, marks=pytest.mark.extended), ("process", 4),
                                          pytest.param("process", 6, marks=pytest.mark.extended)])
def test_sigkill_from_outside_during_a_background_write_keeps_the_previous_file(reference: dict, tmp_path: Path,
                                                                                 writer: str, nth: int) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "0", ckpt_job.SLOW_WRITE_ENV: str(nth)}
    marker, log = tmp_path / "writing", tmp_path / "job.log"
    with open(log, "w") as stderr:
        job = subprocess.Popen([sys.executable, JOB, str(tmp_path), "--writer", writer], env=env, stderr=stderr)
        deadline = time.monotonic() + 90
        while not marker.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        job.kill()  # SIGKILL while the writer thread (or process) holds a half-written file
        code = job.wait(timeout=30)
    assert marker.exists(), log.read_text()[-2000:]
    assert code == -signal.SIGKILL
    holder = marker.read_text()
    if writer == "process":  # the writer process outlives the training process by its one write: kill it too
        assert holder.startswith("process ")
        pid = int(holder.split()[1])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until reaped: a stale temporary is cleared once its process is gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
    else:
        assert holder == "ember-checkpoint-writer"
    leftovers = [f for root in ("ckpt", "best") for f in os.listdir(tmp_path / root) if f.endswith(".tmp")]
    assert len(leftovers) == 1  # the half-written temporary; its destination still holds the previous bytes
    before = {f: torch.load(tmp_path / "ckpt" / f, weights_only=True)["global_step"]
              for f in os.listdir(tmp_path / "ckpt") if f.endswith(".ckpt")}
    assert before  # every visible checkpoint is complete (it loads)
    marker.unlink()
    resumed = ckpt_job.run(str(tmp_path), resume=True, writer=writer)
    ref = reference["32-true"]
    assert same(resumed["module"], ref["module"])
    assert same(resumed["optimizer"], ref["optimizer"])
    assert same(resumed["scheduler"], ref["scheduler"])
    assert files(tmp_path) == files(ref["root"])  # the stale temporary was cleared by the rewrite


def test_sigterm_mid_epoch_saves_exits_143_and_resumes_exactly(reference: dict, tmp_path: Path) -> None:
    stopped = run_job(tmp_path, "--kill", "batch", "--at", "11", "--signal", str(int(signal.SIGTERM)))
    assert stopped.returncode == 128 + signal.SIGTERM == 143, stopped.stderr[-2000:]
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    # Sent before batch 11 (epoch 1, batch 3): saved after that batch, the end of an accumulation window.
    assert last["loops"]["fit"] == {"epoch": 1, "global_step": 6, "batches_seen": 12, "should_stop": False,
                                    "phase": "batch", "batch_idx": 3}
    resumed = ckpt_job.run(str(tmp_path), resume=True)
    ref = reference["32-true"]
    assert same(resumed["module"], ref["module"])
    assert same(resumed["optimizer"], ref["optimizer"])
    assert resumed["loaded"] == ref["loaded"] - 12 * ckpt_job.BATCH  # exactly the 12 consumed batches skipped
