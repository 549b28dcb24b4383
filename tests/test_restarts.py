"""Fault-tolerant runs: ``ember run --max-restarts N`` starts the group again after a worker dies, and the fit
resumes from the run's newest checkpoint by itself, with the weights an uninterrupted run ends with.

Real processes: 2 gloo workers; rank 1 SIGKILLs itself at a random step, in two of the three attempts of one job
(tests/multiprocess/restart_job.py). Each restart's time from the kill to the resumed step is printed.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
import torch
from dist_support import SCRIPTS, Job, clean_env

import ember
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False,
         "enable_model_summary": False}


def _ember_run(out: Path, kills: list[int], max_restarts: int) -> Job:
    out.mkdir(parents=True, exist_ok=True)
    return Job([sys.executable, "-m", "ember", "run", "--nproc-per-node", "2", "--max-restarts", str(max_restarts),
                str(SCRIPTS / "restart_job.py"), str(out), ",".join(map(str, kills))], cwd=out, env=clean_env())


@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_the_fit_ends_with_the_uninterrupted_weights(tmp_path: Path) -> None:
    kills = sorted(random.sample(range(1, 12), 2))  # global steps 1..11 of 12: two restarts, each from its checkpoint
    # another run of the same name, whose newest-looking checkpoint must neither be resumed from nor touched
    other = tmp_path / "faulty" / "ember_logs" / "version_0" / "checkpoints" / "last.ckpt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another run's file")
    os.utime(other, (4e9, 4e9))
    reference = _ember_run(tmp_path / "reference", [], max_restarts=3)
    faulty = _ember_run(tmp_path / "faulty", kills, max_restarts=3)
    code, log = faulty.wait(timeout=240)
    ref_code, ref_log = reference.wait(timeout=240)
    assert code == 0, f"kills at steps {kills}:\n{log}"
    assert ref_code == 0, ref_log
    assert log.count("was killed by SIGKILL; stopping the others and starting the group again") == 2, log
    for attempt in (1, 2):
        assert f"(restart {attempt} of 3)" in log

    out = tmp_path / "faulty"
    resumed = [json.loads((out / f"start-{a}.json").read_text()) for a in (1, 2)]
    killed = [json.loads((out / f"kill-{a}.json").read_text()) for a in (0, 1)]
    delays = [round(s["time"] - k["time"], 1) for k, s in zip(killed, resumed, strict=True)]
    starts = [round(s["time"] - s["process_started"], 1) for s in resumed]
    print(f"kills at steps {kills}: kill to resumed step {delays} s, of which process start to step {starts} s")
    assert [k["global_step"] for k in killed] == kills
    for kill, start in zip(killed, resumed, strict=True):
        # the kill comes before that step's save; the newest save is the periodic one (every 2 steps) or the
        # checkpoint callback's at an epoch's end (every 3 steps), whichever is later
        assert start["global_step"] == max(s for s in range(kill["global_step"]) if s % 2 == 0 or s % 3 == 0)

    weights = torch.load(out / "weights.pt", weights_only=True)
    expected = torch.load(tmp_path / "reference" / "weights.pt", weights_only=True)
    assert weights.keys() == expected.keys()
    for key in weights:
        assert torch.equal(weights[key], expected[key]), f"{key} differs after kills at steps {kills}"
    # one run folder for the whole job, beside the other run's, which is as it was
    assert sorted(p.name for p in (out / "ember_logs").iterdir()) == ["version_0", "version_1"]
    assert other.read_bytes() == b"another run's file" and other.stat().st_mtime == 4e9
    assert sorted(p.name for p in other.parent.iterdir()) == ["last.ckpt"]


@pytest.mark.slow
@pytest.mark.extended  # the restart path itself is held by the test above in every run
def test_a_job_out_of_restarts_names_every_death(tmp_path: Path) -> None:
    code, log = _ember_run(tmp_path, [1, 2], max_restarts=1).wait(timeout=180)
    assert code == 1, log
    assert "the job ran out of restarts (1 restart(s)); earlier deaths:" in log
    assert "attempt 1: rank 1" in log and "was killed by SIGKILL" in log
    assert "last failure:" in log and "rank 1" in log.split("last failure:")[1]


def _attempt(monkeypatch: pytest.MonkeyPatch, attempt: int, root: Path, **kwargs: object) -> ember.Trainer:
    """A fit as the elastic agent's attempt ``attempt`` of a job with restarts runs it (one process)."""
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(attempt))
    trainer = ember.Trainer(default_root_dir=str(root), restart_save_every_n_steps=3, **QUIET, **kwargs)
    torch.manual_seed(0)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=64))  # 8 batches per epoch
    return trainer


@pytest.mark.parametrize("launcher_keeps_state", [True, False])
def test_a_restarted_fit_resumes_from_the_newest_checkpoint_of_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       launcher_keeps_state: bool) -> None:
    if launcher_keeps_state:  # what ember run gives its processes: a folder kept for the job's lifetime
        (tmp_path / "state").mkdir()
        monkeypatch.setenv("EMBER_RESTART_STATE", str(tmp_path / "state"))
    first = _attempt(monkeypatch, 0, tmp_path / "run", max_steps=7, enable_checkpointing=False)  # "dies" at 7
    assert first.ckpt_path is None
    last = tmp_path / "run" / "ember_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 6  # every 3 steps: the newest is step 6
    again = _attempt(monkeypatch, 1, tmp_path / "run", max_steps=10, enable_checkpointing=False)
    assert again.ckpt_path == str(last)
    assert again.global_step == 10
    # with the launcher's record the restarted group writes into the same run folder; without it (torchrun,
    # SLURM), a new version continues from the latest run of the name
    versions = sorted(p.name for p in (tmp_path / "run" / "ember_logs").iterdir())
    assert versions == (["version_0"] if launcher_keeps_state else ["version_0", "version_1"])


def test_a_run_that_may_not_restart_saves_nothing_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_MAX_RESTARTS", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    trainer = ember.Trainer(default_root_dir=str(tmp_path), restart_save_every_n_steps=1, max_steps=4,
                            enable_checkpointing=False, **QUIET)
    trainer.fit(TinyClassifier(), *tiny_loaders(n=64))
    assert not list(tmp_path.rglob("*.ckpt"))
