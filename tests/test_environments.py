"""Cluster environments as plugins: what each reads from its launcher's variables, how "auto" picks one and
the strategy, and the errors for a job whose shape does not match the Trainer's arguments."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dist_support import free_port

import ember
from ember.launcher import describe_failure, script_argv
from ember.plugins.environments import local, slurm, torchrun
from ember.plugins.strategies.ddp import DDPStrategy
from ember.plugins.strategies.distributed import requested_processes
from ember.testing import TinyClassifier

TORCHRUN = {"TORCHELASTIC_RUN_ID": "job", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29511"}
SLURM = {"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_JOB_ID": "12345",
         "SLURM_JOB_NODELIST": "gpu[003-004]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "2",
         "SLURM_JOB_NAME": "train"}
_ALL = {*TORCHRUN, *SLURM, "NODE_RANK", "SLURM_NODELIST", "SLURM_NNODES", "SLURM_TASKS_PER_NODE"}

@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in this process write their logs and checkpoints under the test's own directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _ALL:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the torchrun environment chains its own hook
    return monkeypatch


def test_torchrun_variables(no_launcher: pytest.MonkeyPatch) -> None:
    for k, v in TORCHRUN.items():
        no_launcher.setenv(k, v)
    assert torchrun.detected()
    info = torchrun.TorchrunEnvironment().distributed_info()
    assert info == {"global_rank": 3, "local_rank": 1, "node_rank": 1, "world_size": 4, "local_world_size": 2,
                    "num_nodes": 2, "main_address": "10.0.0.1", "main_port": 29511, "launched": True}
    trainer = ember.Trainer(accelerator="cpu")
    assert trainer.role_identities["environment"] == "environment.torchrun"
    assert trainer.role_identities["strategy"] == "strategy.ddp"


def test_slurm_variables(no_launcher: pytest.MonkeyPatch) -> None:
    for k, v in SLURM.items():
        no_launcher.setenv(k, v)
    info = slurm.SLURMEnvironment().distributed_info()
    assert info == {"global_rank": 2, "local_rank": 0, "node_rank": 1, "world_size": 4, "local_world_size": 2,
                    "num_nodes": 2, "main_address": "gpu003", "main_port": 15000 + 12345 % 20000, "launched": True}
    assert ember.Trainer(accelerator="cpu").role_identities["environment"] == "environment.slurm"
    no_launcher.setenv("SLURM_JOB_NAME", "bash")  # an interactive allocation: the shell started this process
    assert not slurm.detected()
    assert ember.Trainer(accelerator="cpu").role_identities["environment"] == "environment.local"


def test_torchrun_wins_over_slurm_when_both_are_there(no_launcher: pytest.MonkeyPatch) -> None:
    for k, v in {**SLURM, **TORCHRUN}.items():
        no_launcher.setenv(k, v)
    assert ember.Trainer(accelerator="cpu").role_identities["environment"] == "environment.torchrun"


@pytest.mark.parametrize(("nodelist", "host"), [("gpu[003-005,9],cpu1", "gpu003"), ("node7", "node7"),
                                                 ("a1,b[2-3]", "a1"), ("rack[1-2]-n[01-04]", "rack1-n01")])
def test_first_host_of_a_slurm_node_list(nodelist: str, host: str) -> None:
    assert slurm.first_host(nodelist) == host


def test_local_alone_and_started_by_hand(no_launcher: pytest.MonkeyPatch) -> None:
    info = local.LocalEnvironment().distributed_info()
    assert info["world_size"] == 1 and info["launched"] is False
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "29512"}.items():
        no_launcher.setenv(k, v)
    info = local.LocalEnvironment().distributed_info()
    assert (info["global_rank"], info["local_rank"], info["world_size"], info["launched"]) == (1, 1, 2, True)
    no_launcher.delenv("MASTER_PORT")
    with pytest.raises(ember.ConfigurationError, match="MASTER_PORT"):
        local.LocalEnvironment().distributed_info()


def test_naming_an_environment_that_is_not_there_says_how_to_start_it() -> None:
    with pytest.raises(ember.ConfigurationError, match="not started by torchrun.*ember run"):
        ember.Trainer(accelerator="cpu", environment="torchrun")
    with pytest.raises(ember.UnknownPluginError, match="local, slurm, torchrun"):
        ember.Trainer(accelerator="cpu", environment="kubernetes")


def test_devices_that_disagree_with_the_launcher_are_refused(no_launcher: pytest.MonkeyPatch) -> None:
    for k, v in {**TORCHRUN, "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
                 "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"}.items():
        no_launcher.setenv(k, v)
    trainer = ember.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 8), torch.zeros(4).long()))
    with pytest.raises(ember.ConfigurationError, match="asks for 2 processes per node, but the launcher started 1"):
        trainer.fit(TinyClassifier(), data)


@pytest.mark.parametrize(("devices", "n"), [(2, 2), ([0, 3], 2), ("0,1,2", 3), ("3", 3), ("auto", 1), ("1,", 1)])
def test_requested_processes(devices: Any, n: int) -> None:
    assert requested_processes(ember.TrainerConfig(devices=devices)) == n


@pytest.mark.parametrize("devices", ["two", 0, True, -3])
def test_bad_devices_are_explained(devices: Any) -> None:
    with pytest.raises(ember.ConfigurationError, match="devices"):
        requested_processes(ember.TrainerConfig(devices=devices))


def test_ddp_options_are_checked_against_distributed_data_parallel() -> None:
    with pytest.raises(ember.ConfigurationError, match="find_unused_params.*find_unused_parameters"):
        DDPStrategy(find_unused_params=True)
    with pytest.raises(ember.ConfigurationError, match="timeout"):
        DDPStrategy(timeout=-1)
    strategy = DDPStrategy(find_unused_parameters=True, timeout=60)
    assert strategy.ddp_kwargs == {"find_unused_parameters": True}
    assert strategy.timeout.total_seconds() == 60


def test_ddp_options_reach_the_wrapper() -> None:
    trainer = ember.Trainer(accelerator="cpu", strategy=DDPStrategy(find_unused_parameters=True), devices=1,
                            max_epochs=1, num_sanity_val_steps=0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 8), torch.zeros(4).long()))
    trainer.fit(TinyClassifier(), data)
    assert trainer.model.find_unused_parameters is True


def test_re_running_the_program_is_refused_under_pytest() -> None:
    with pytest.raises(ember.ConfigurationError, match="pytest session.*ember run --nproc-per-node"):
        script_argv()


def test_the_launcher_reports_the_rank_that_failed_first(tmp_path: Any, no_launcher: pytest.MonkeyPatch) -> None:
    """Error files written as the ranks write them; rank 0's error (a lost connection) is dated earlier here
    but marked as caused by a peer, so rank 1's is the root cause."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    files = {}
    for rank, exc in ((0, RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1234")), (1, KeyError("w"))):
        files[rank] = tmp_path / f"error{rank}.json"
        no_launcher.setenv("TORCHELASTIC_ERROR_FILE", str(files[rank]))
        try:
            raise exc
        except Exception as raised:
            torchrun.write_error_file(raised, rank)
    data = json.loads(files[0].read_text())
    data["message"]["extraInfo"]["ember"]["time"] -= 5
    files[0].write_text(json.dumps(data))
    failures = {r: ProcessFailure(local_rank=r, pid=100 + r, exitcode=1, error_file=str(f)) for r, f in files.items()}
    error = describe_failure(ChildFailedError("job", failures))
    assert isinstance(error, ember.WorkerFailedError)
    assert error.rank == 1 and error.error == "KeyError: 'w'" and error.exitcode == 1
    assert "raise exc" in error.remote_traceback
    assert str(error).startswith("rank 1 (local rank 1, pid 101) failed: KeyError: 'w'")
    assert "rank 0: RuntimeError: [gloo] Connection closed by peer" in str(error)
    assert "(after another rank failed)" in str(error)
    assert ChildFailedError("job", failures).get_first_failure()[0] == 1  # torchrun's own summary agrees


def test_an_error_file_is_written_whole_or_not_at_all(tmp_path: Any, no_launcher: pytest.MonkeyPatch) -> None:
    """The agent reads a failed rank's file as JSON and fails itself on a cut-short one: the file is written
    beside and renamed into place, and an error that cannot be recorded leaves the last whole file as it was."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / "error.json"
    no_launcher.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    try:
        raise KeyError("w")
    except KeyError as raised:
        torchrun.write_error_file(raised, 0)
    whole = path.read_text()
    unrecordable = RuntimeError("hung")
    unrecordable.ember_info = {"hung": object()}  # type: ignore[attr-defined]  # JSON cannot hold it
    torchrun.write_error_file(unrecordable, 0)  # no error of its own while an error is being reported
    assert path.read_text() == whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json"]  # no temporary file left
    assert ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(path)).message["message"] == "KeyError: 'w'"


def test_a_killed_rank_is_described_by_its_signal() -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    error = describe_failure(ChildFailedError("job", {0: ProcessFailure(0, 7, -9, "<N/A>")}))
    assert str(error) == "rank 0 (local rank 0, pid 7) failed: killed by signal SIGKILL"


@pytest.fixture
def fake_scontrol(tmp_path: Any, no_launcher: pytest.MonkeyPatch) -> Any:
    """An ``scontrol`` on PATH that records its arguments (there is no SLURM here)."""
    calls = tmp_path / "scontrol.log"
    script = tmp_path / "bin" / "scontrol"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    script.chmod(0o755)
    no_launcher.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    for k, v in SLURM.items():
        no_launcher.setenv(k, v)
    return calls


def test_slurm_requeues_the_job_from_rank_zero(fake_scontrol: Any, no_launcher: pytest.MonkeyPatch) -> None:
    env = slurm.SLURMEnvironment()
    assert env.requeue(trainer=SimpleNamespace(global_rank=1), signum=signal.SIGUSR1, requested=False) is True
    assert not fake_scontrol.exists()
    assert env.requeue(trainer=SimpleNamespace(global_rank=0), signum=signal.SIGTERM, requested=False) is None
    assert env.requeue(trainer=SimpleNamespace(global_rank=0), signum=signal.SIGUSR1, requested=False) is True
    no_launcher.setenv("SLURM_ARRAY_JOB_ID", "700")
    no_launcher.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert env.requeue(trainer=SimpleNamespace(global_rank=0), signum=signal.SIGTERM, requested=True) is True
    assert fake_scontrol.read_text().splitlines() == ["requeue 12345", "requeue 700_3"]
    assert slurm.SLURMEnvironment(auto_requeue=False).requeue(
        trainer=SimpleNamespace(global_rank=0), signum=signal.SIGUSR1, requested=True) is None


def test_slurms_warning_signal_checkpoints_stops_and_requeues(tmp_path: Any, fake_scontrol: Any,
                                                               no_launcher: pytest.MonkeyPatch) -> None:
    signals = pytest.importorskip("ember.core.loop.signals", reason="needs ember's checkpointed stops")
    for k, v in {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NUM_NODES": "1",
                 "SLURM_NODEID": "0"}.items():
        no_launcher.setenv(k, v)
    # this machine and a port of its own (the job's first node is not a real host here, and the port derived
    # from the job id is the same for every run of this test on the machine)
    no_launcher.setenv("MASTER_ADDR", "127.0.0.1")
    no_launcher.setenv("MASTER_PORT", str(free_port()))

    class WarnAtStep3:
        def on_train_batch_end(self, trainer: Any) -> None:
            if trainer.global_step == 3:
                os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.getsignal(signal.SIGUSR1)
    trainer = ember.Trainer(accelerator="cpu", max_epochs=5, num_sanity_val_steps=0, enable_progress_bar=False,
                            logger=False, default_root_dir=str(tmp_path), callbacks=[WarnAtStep3()])
    assert trainer.role_identities["environment"] == "environment.slurm"
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(32, 8), torch.zeros(32).long()),
                                       batch_size=4)
    with pytest.raises(signals.SignalExit) as stopped:
        trainer.fit(TinyClassifier(), data)
    assert stopped.value.signum == signal.SIGUSR1 and trainer.global_step == 3
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    assert fake_scontrol.read_text().splitlines() == ["requeue 12345"]
    assert signal.getsignal(signal.SIGUSR1) is previous  # put back after the run
