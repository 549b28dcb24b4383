"""Ctrl-C and SIGTERM sent to real child processes running a fit (design.md section 5).

The first SIGINT stops at the next safe point, saves where checkpointing is on, runs ``on_exception`` and
raises KeyboardInterrupt with the trained weights in memory; ``ember fit`` exits 130 naming the checkpoint;
a second SIGINT stops at once; SIGTERM saves and exits 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ember.plugins.checkpoint_io.torch_file import safe_load

JOB = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    import torch
    import ember
    from ember.plugins.checkpoint_io.torch_file import safe_load
    from ember.testing import TinyClassifier, tiny_loaders

    class Slow(TinyClassifier):
        """Signals when training is under way; each step takes a little while (a long one on request)."""

        def __init__(self, long_step: int = -1) -> None:
            super().__init__()
            self.long_step = long_step

        def training_step(self, batch, batch_idx):
            if self.trainer.global_step == 2:
                Path("started").touch()
            time.sleep(60 if self.trainer.global_step == self.long_step else 0.02)
            return super().training_step(batch, batch_idx)

    class Data(ember.DataModule if hasattr(ember, "DataModule") else object):
        def train_dataloader(self):
            return tiny_loaders(n=64)[0]

        def val_dataloader(self):
            return tiny_loaders(n=64)[1]

    class Events:
        def on_exception(self, exception):
            print("on_exception", type(exception).__name__, flush=True)

    if __name__ == "__main__":
        model = Slow(long_step=int(sys.argv[2]))
        trainer = ember.Trainer(accelerator="cpu", max_epochs=1000, default_root_dir="root", logger=False,
                                enable_progress_bar=False,
                                enable_model_summary=False, num_sanity_val_steps=0, callbacks=[Events()],
                                enable_checkpointing=sys.argv[1] == "on")
        try:
            trainer.fit(model, *tiny_loaders(n=64))
        except KeyboardInterrupt as exc:
            path = getattr(exc, "checkpoint_path", None)
            if path:
                saved = safe_load(path)
                same = all(torch.equal(saved["state_dict"][k], v) for k, v in model.state_dict().items())
                print("weights in memory equal the checkpoint:", same, flush=True)
            print("KeyboardInterrupt", "at a safe point" if hasattr(exc, "checkpoint_path") else "at once", path,
                  flush=True)
            raise
        print("fit returned", flush=True)
''')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "slowjob.py").write_text(JOB)
    return tmp_path


def start(project: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(project) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, *args], cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_started(proc: subprocess.Popen, project: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (project / "started").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the job never started training:\n{out}\n{err}")
        time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the job did not stop:\n{out}\n{err}")
    return proc.returncode, out, err


@pytest.mark.slow
def test_ctrl_c_stops_saves_runs_on_exception_and_raises_keyboard_interrupt(project: Path) -> None:
    proc = start(project, "slowjob.py", "on", "-1")
    wait_started(proc, project)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == -signal.SIGINT, (out, err)  # an uncaught KeyboardInterrupt: the shell sees 130
    last = project / "root" / "checkpoints" / "last.ckpt"
    assert "on_exception KeyboardInterrupt" in out
    assert "weights in memory equal the checkpoint: True" in out
    assert f"KeyboardInterrupt at a safe point {last}" in out
    assert "fit returned" not in out
    assert safe_load(str(last))["loops"]["fit"]["phase"] in ("batch", "epoch_start")


@pytest.mark.extended  # the interrupt path with checkpointing is held by the test above in every run
def test_ctrl_c_without_checkpointing_raises_too(project: Path) -> None:
    proc = start(project, "slowjob.py", "off", "-1")
    wait_started(proc, project)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == -signal.SIGINT, (out, err)
    assert "KeyboardInterrupt at a safe point None" in out and "fit returned" not in out
    assert not (project / "root" / "checkpoints").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once(project: Path) -> None:
    proc = start(project, "slowjob.py", "on", "3")  # step 3 sleeps a minute: no safe point comes
    wait_started(proc, project)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=30)
    assert time.monotonic() - began < 10
    assert code == -signal.SIGINT, (out, err)
    assert "KeyboardInterrupt at once None" in out  # raised at once, not at a safe point
    assert not (project / "root" / "checkpoints" / "last.ckpt").exists()


@pytest.mark.slow
@pytest.mark.extended  # SIGTERM mid-epoch saves and exits 143 in every run: tests/test_checkpoint_kill.py
def test_sigterm_saves_and_exits_143(project: Path) -> None:
    proc = start(project, "slowjob.py", "on", "-1")
    wait_started(proc, project)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, (out, err)
    assert "on_exception SignalExit" in out
    assert safe_load(str(project / "root" / "checkpoints" / "last.ckpt"))["global_step"] >= 3


@pytest.mark.slow
def test_the_ember_command_exits_130_and_says_where_the_checkpoint_is(project: Path) -> None:
    proc = start(project, "-m", "ember", "fit", "--model", "slowjob:Slow", "--data", "slowjob:Data",
                 "--trainer.max_epochs", "1000", "--trainer.default_root_dir", "root", "--trainer.logger", "false",
                 "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0")
    wait_started(proc, project)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    last = project / "root" / "checkpoints" / "last.ckpt"
    assert code == 130, (out, err)
    assert f"ember: interrupted (Ctrl-C); the checkpoint is {last} (resume with --ckpt_path {last})" in err
    assert safe_load(str(last))["global_step"] >= 3


@pytest.mark.slow
def test_sigterm_to_one_ddp_worker_saves_and_every_process_exits_143(tmp_path: Path) -> None:
    import json

    from dist_support import SCRIPTS, Job

    options = {"enable_checkpointing": True, "default_root_dir": str(tmp_path / "root")}
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "slow_ddp_job.py"),
               str(tmp_path), "-1", json.dumps(options)], cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "pid1").exists():
        assert job.proc.poll() is None and time.monotonic() < deadline, job.wait(5)[1]
        time.sleep(0.05)
    os.kill(int((tmp_path / "pid1").read_text()), signal.SIGTERM)
    code, out = job.wait(timeout=60)
    assert code == 143, out  # the launcher passes on the workers' status, not a failure (1)
    assert "ember run: the processes stopped on a signal (exit status 143)" in out
    assert safe_load(str(tmp_path / "root" / "checkpoints" / "last.ckpt"))["global_step"] >= 1
