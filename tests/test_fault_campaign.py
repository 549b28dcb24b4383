"""The fault campaign: what real runs meet, done for real (files, folders, processes, signals), and for each
fault what the user sees and what is kept. docs/reliability.md ("Faults and what they leave") sums them up.

Disk full is covered three ways: a real 512 KiB tmpfs under a single-file and a sharded save
(tests/test_reliability_checkpoints.py, where mounting is permitted), every fsync failing in the writer process
(tests/test_async_checkpoint.py), and, here, the writer thread's fsync failing in the middle of a fit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_support import SCRIPTS, Job
from torch.utils.data import DataLoader

import ember
from ember.plugins._shared import checkpoint_files
from ember.plugins.callbacks import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.testing import TinyClassifier, tiny_dataset, tiny_loaders

sys.path.insert(0, str(Path(__file__).parent))
import ckpt_job  # noqa: E402

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False}
ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- 1. a read-only run folder ----------------------------------------------------------------------------------
def _mount(folder: Path, options: str) -> bool:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder``, that this process cannot write: chmod 555, or for root (whom chmod does not stop) a read-only
    tmpfs mounted on it."""
    folder.mkdir()
    if not ROOT:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    if not _mount(folder, "size=1m,ro"):
        pytest.skip("running as root, and mounting a read-only tmpfs is not permitted here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


@pytest.mark.parametrize("fault", ["read-only", "under-a-file"])
@pytest.mark.parametrize("folder", ["run", "checkpoint"])
def test_a_folder_that_cannot_be_written_stops_the_fit_before_its_first_step(tmp_path: Path, fault: str,
                                                                              folder: str) -> None:
    """User sees: one ConfigurationError, before the first step, naming the folder and why (read-only, or a
    file where a folder should be) and how to choose another; no chained OSError traceback. Kept: the
    module's weights in memory, untouched."""
    with contextlib.ExitStack() as stack:
        if fault == "read-only":
            base = stack.enter_context(read_only(tmp_path / "ro"))
            reason = "is on a read-only file system" if ROOT else "is not writable"
        else:
            base = tmp_path / "a-file"
            base.write_text("not a folder")
            reason = f"{base} is a file, not a folder"
        if folder == "run":
            target = base / "runs" / "ember_logs"
            options: dict[str, Any] = {"default_root_dir": str(base / "runs")}
        else:
            target = base / "ck"
            options = {"logger": False, "default_root_dir": str(tmp_path),
                       "callbacks": [ModelCheckpoint(dirpath=target)]}
        model = TinyClassifier()
        before = weights(model)
        trainer = ember.Trainer(max_epochs=1, **QUIET, **options)
        with pytest.raises(ember.ConfigurationError) as info:
            trainer.fit(model, *tiny_loaders(n=16))
    message = str(info.value)
    assert message.startswith(f"cannot write the {folder} folder {target}: ") and reason in message, message
    assert "Stopped before the first step" in message
    assert info.value.__cause__ is None and info.value.__context__ is None  # no traceback soup
    assert trainer.global_step == 0 and same(weights(model), before)


class TurnReadOnly:
    """Makes the checkpoint folder read-only at a global step: a remount for root, chmod otherwise."""

    def __init__(self, folder: Path, at: int) -> None:
        self.folder, self.at = folder, at

    def on_train_batch_start(self, trainer: Any) -> None:
        if trainer.global_step == self.at and not getattr(self, "done", False):
            self.done = True
            if ROOT:
                subprocess.run(["mount", "-o", "remount,ro", str(self.folder)], check=True)
            else:
                self.folder.chmod(0o555)


def test_a_folder_turned_read_only_during_the_fit_fails_at_the_next_save_keeping_the_weights(tmp_path: Path) -> None:
    """User sees: a CheckpointError at the save after the folder turned read-only, naming the file and the
    OSError ("Read-only file system" / "Permission denied"), without the writer thread's frames. Kept: the
    earlier checkpoint, intact, and the trained weights in memory (they can be saved elsewhere)."""
    folder = tmp_path / "ck"
    folder.mkdir()
    if ROOT and not _mount(folder, "size=1m"):
        pytest.skip("running as root, and mounting a tmpfs is not permitted here")
    try:
        model = TinyClassifier()
        before = weights(model)
        trainer = ember.Trainer(max_epochs=3, logger=False, default_root_dir=str(tmp_path), **QUIET,
                                callbacks=[ModelCheckpoint(dirpath=folder, every_n_train_steps=2, save_last=False),
                                           TurnReadOnly(folder, 3)])
        with pytest.raises(ember.CheckpointError) as info:
            trainer.fit(model, *tiny_loaders(n=16))
        message = str(info.value)
        assert f"writing {folder / 'epoch=1-step=4.ckpt'} in the background failed: " in message, message
        assert "Read-only file system" in message or "Permission denied" in message, message
        assert info.value.__cause__.__traceback__ is None  # the OSError's message, not the writer's frames
        assert sorted(os.listdir(folder)) == ["epoch=0-step=2.ckpt"]
        assert safe_load(str(folder / "epoch=0-step=2.ckpt"))["global_step"] == 2
        assert trainer.global_step >= 4 and not same(weights(model), before)  # trained, in memory
        trainer.save_checkpoint(tmp_path / "rescued.ckpt")
        assert same(safe_load(str(tmp_path / "rescued.ckpt"))["state_dict"], weights(model))
    finally:
        if ROOT:
            subprocess.run(["umount", str(folder)], capture_output=True)
        else:
            folder.chmod(0o755)


# -- 2. the checkpoint folder deleted during a fit --------------------------------------------------------------
class DeleteFolder:
    """Deletes the checkpoint folder at the start of a global step's batch, once the save before it has landed."""

    def __init__(self, folder: Path, at: int) -> None:
        self.folder, self.at = folder, at

    def on_train_batch_start(self, trainer: Any) -> None:
        if trainer.global_step == self.at:
            # Wait first: the writer thread creates the folder with its first file (nothing creates it before), so
            # a folder looked for before the wait may not be there yet on a busy machine
            trainer.checkpointing.writer.wait()
            shutil.rmtree(self.folder)


def delete_during_write(monkeypatch: pytest.MonkeyPatch, folder: Path, nth: int) -> None:
    """Deletes ``folder`` while the writer thread is inside its ``nth`` file write (bytes written, not renamed)."""
    real = checkpoint_files._write_once
    count = 0

    def write_once(path: str, write: Any, content: Any, *how: Any) -> None:
        nonlocal count
        if threading.current_thread() is threading.main_thread():
            return real(path, write, content, *how)
        count += 1
        if count != nth:
            return real(path, write, content, *how)

        def then_delete(f: Any) -> None:
            write(f)
            shutil.rmtree(folder)

        return real(path, then_delete, content, *how)

    monkeypatch.setattr(checkpoint_files, "_write_once", write_once)


def fit_tiny(root: Path, max_epochs: int, callbacks: list[Any], ckpt_path: str | None = None) -> Any:
    ember.seed_everything(0)
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=max_epochs, logger=False, default_root_dir=str(root), callbacks=callbacks,
                            **QUIET)
    trainer.fit(model, *tiny_loaders(n=32, shuffle=True), ckpt_path=ckpt_path)
    return model, trainer


@pytest.mark.parametrize("when", ["between-saves", "during-a-write"])
def test_a_checkpoint_folder_deleted_during_the_fit_is_created_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture,
                                                                     when: str) -> None:
    """User sees: the fit goes on and ends (a warning when a write lost its folder under it); the next save
    creates the folder again. Kept: every save from then on; a resume from the new last.ckpt ends bitwise where
    an uninterrupted run ends."""
    folder = tmp_path / "run" / "ck"
    extra: list[Any] = [DeleteFolder(folder, 3)] if when == "between-saves" else []
    if when == "during-a-write":
        delete_during_write(monkeypatch, folder, 2)  # the file of step 4 (the first is step 2's, then its link)
    with caplog.at_level("WARNING", logger="ember"):
        _, trainer = fit_tiny(tmp_path / "run", 2, [ModelCheckpoint(dirpath=folder, every_n_train_steps=2,
                                                                    save_top_k=-1), *extra])
    monkeypatch.undo()
    assert trainer.global_step == 8
    # step 2's file went with the folder; step 4's was written (again, when its write lost the folder)
    assert sorted(os.listdir(folder)) == ["epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "epoch=1-step=8.ckpt",
                                          "last.ckpt"]
    if when == "during-a-write":
        assert f"the folder {folder} was deleted while epoch=0-step=4.ckpt was written" in caplog.text
    assert safe_load(str(folder / "last.ckpt"))["global_step"] == 8
    resumed, _ = fit_tiny(tmp_path / "run", 3, [ModelCheckpoint(dirpath=folder, every_n_train_steps=2)],
                          ckpt_path=str(folder / "last.ckpt"))
    reference, _ = fit_tiny(tmp_path / "ref", 3, [ModelCheckpoint(dirpath=tmp_path / "ref" / "ck",
                                                                  every_n_train_steps=2)])
    assert same(weights(resumed), weights(reference))


# -- 3. a DataLoader worker process killed ----------------------------------------------------------------------
def child_pids() -> list[int]:
    """This process's children (its DataLoader workers), from /proc."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


class KillAWorker:
    """SIGKILLs one DataLoader worker process at batch 2 of the training or validation loop."""

    def __init__(self) -> None:
        self.killed: int | None = None
        self.before = set(child_pids())  # (workers of an earlier loader may still be exiting)

    def _kill(self, batch_idx: int) -> None:
        if batch_idx == 2 and self.killed is None:
            self.killed = next(pid for pid in child_pids() if pid not in self.before)
            os.kill(self.killed, signal.SIGKILL)

    def on_train_batch_end(self, batch_idx: int) -> None:
        self._kill(batch_idx)

    def on_validation_batch_end(self, batch_idx: int) -> None:
        self._kill(batch_idx)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="finds the worker processes in /proc")
@pytest.mark.skipif(sys.version_info < (3, 11), reason="the note needs BaseException.add_note (Python 3.11)")
# torch's SIGCHLD handler raises the worker's death in whatever Python code runs when the signal lands; when that
# is a weakref callback, Python swallows it ("Exception ignored") and the loader raises when it next finds the
# worker gone: that error is the one asserted below. pytest reports the swallowed one as a warning.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("stage", ["train", "validate"])
def test_a_killed_dataloader_worker_is_an_error_naming_the_loader_and_stage(tmp_path: Path, stage: str) -> None:
    """User sees: torch's "DataLoader worker (pid N) is killed by signal" (or, when the worker died while handing
    over a batch, "Connection reset by peer") with ember's note naming the pid and signal,
    the loader (trainer.train_dataloader / trainer.val_dataloaders), its num_workers, the stage, and the usual
    cause (the out-of-memory killer); within seconds, no hang. Kept: the weights trained so far, in memory."""
    killer = KillAWorker()
    trainer = ember.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[killer],
                            default_root_dir=str(tmp_path), **QUIET)
    loader = DataLoader(tiny_dataset(64), batch_size=2, num_workers=2)
    started = time.monotonic()
    # torch's "DataLoader worker (pid N) is killed by signal", or a broken connection when the worker died while
    # handing over a batch
    with pytest.raises((RuntimeError, OSError)) as info:
        if stage == "train":
            trainer.fit(TinyClassifier(), loader)
        else:
            trainer.validate(TinyClassifier(), loader)
    seconds = time.monotonic() - started
    notes = "\n".join(getattr(info.value, "__notes__", [])) or repr(info.value)
    name = "train_dataloader" if stage == "train" else "val_dataloaders"
    assert f"a worker process (pid {killer.killed}" in notes, notes  # (", killed by SIGKILL" where still known)
    assert f"of the {stage} stage's loader trainer.{name} (DataLoader with num_workers=2) died during " \
           f"{'fit' if stage == 'train' else 'validate'}" in notes, notes
    assert "out-of-memory killer" in notes
    if stage == "train":
        assert trainer.global_step >= 3  # the steps before the death stay in the module
    assert seconds < 60, seconds


# -- 4. a rank stopped with SIGSTOP -----------------------------------------------------------------------------
def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.extended  # a hung rank is named in every run by tests/test_reliability_watchdog.py
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_rank_stopped_with_sigstop_is_named_and_every_rank_ends(tmp_path: Path) -> None:
    """User sees: the job ends with exit status 1 a bounded time after the stop; the HangError names the stopped
    rank ("sent no heartbeat ... stopped, e.g. by SIGSTOP"), the step it was last heard from, and the other rank
    as waiting for it; the launcher's summary says that the stopped rank hung (not merely that it was killed),
    with its last step and hook, and that the launcher killed it. Kept: nothing is left running (the stopped
    process is killed by the launcher)."""
    job = Job([sys.executable, "-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "slow_ddp_job.py"),
               str(tmp_path), "-1", '{"hang_timeout": 5}'], cwd=tmp_path)
    pid_file = tmp_path / "pid1"
    deadline = time.monotonic() + 90
    while not pid_file.exists() and job.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), job.wait(timeout=5)[1]
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1) if (tmp_path / f"pid{r}").exists()]
    stopped = int(pid_file.read_text())
    os.kill(stopped, signal.SIGSTOP)
    at = time.monotonic()
    try:
        code, out = job.wait(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
    seconds = time.monotonic() - at
    print(f"SIGSTOP to rank 1: the job ended {seconds:.1f} s later (hang_timeout=5 s)")
    assert code == 1, out
    assert "rank 1 made no progress for 5 s and sent no heartbeat (the whole process is stopped, e.g. by SIGSTOP" \
        in out, out
    assert "last heard from at global step " in out and "ranks [0] wait for it" in out, out
    summary = next(line for line in out.splitlines() if line.startswith("ember run: rank "))
    assert summary.startswith(f"ember run: rank 1 (local rank 1, pid {stopped}) hung: no progress and no heartbeat "
                              "for 5 s (the whole process was stopped, e.g. by SIGSTOP"), summary
    # the step and hook of its last heartbeat (where the main thread was then: a step, a hook, a collective)
    assert re.search(r"; last heard from at global step \d+(, in \w+)? \(", summary), summary
    assert summary.endswith("; the launcher killed it (SIGKILL) when the job stopped"), summary
    assert "killed by signal SIGKILL" not in out, out
    assert seconds < 5 + 3 + 30 + 10  # hang_timeout, the watchdog's grace, the agent's kill timeout, slack
    assert all(_gone(pid) for pid in pids), pids


# -- 5. SIGKILL between the write and the rename of a background save --------------------------------------------
#: Run in a subprocess: ckpt_job's fit, whose N-th background rename (the file complete and fsynced) first
#: writes OUT/renaming with the temporary file's name, then waits to be killed.
_STOP_BEFORE_RENAME = """
import os, sys, threading, time
sys.path.insert(0, {tests!r})
import ckpt_job
from ember.plugins._shared import checkpoint_files
out, nth = sys.argv[1], int(sys.argv[2])
real, count = checkpoint_files._replace, 0
def replace(tmp, path):
    global count
    if threading.current_thread() is not threading.main_thread():
        count += 1
        if count == nth:
            with open(os.path.join(out, "renaming.tmp"), "w") as f:
                f.write(tmp)
            os.replace(os.path.join(out, "renaming.tmp"), os.path.join(out, "renaming"))
            time.sleep(300)
    return real(tmp, path)
checkpoint_files._replace = replace
ckpt_job.main([out])
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return ckpt_job.run(str(tmp_path_factory.mktemp("reference")))


@pytest.mark.slow
@pytest.mark.parametrize("nth", [2, pytest.param(5, marks=pytest.mark.extended)])
def test_sigkill_between_the_write_and_the_rename_keeps_the_previous_checkpoint(reference: dict, tmp_path: Path,
                                                                              nth: int) -> None:
    """User sees: the process gone (SIGKILL) with a complete temporary file next to the checkpoint it was to
    replace. Kept: every visible checkpoint loads (the previous one in place); a resume from last ends bitwise
    where an uninterrupted run ends, and the stale temporary file is cleared."""
    script = _STOP_BEFORE_RENAME.format(tests=str(Path(__file__).parent))
    marker = tmp_path / "renaming"
    with open(tmp_path / "job.log", "w") as log:
        job = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(nth)], stderr=log,
                               env={**os.environ, "PYTHONHASHSEED": "0"})
        deadline = time.monotonic() + 90
        while not marker.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        job.kill()
        code = job.wait(timeout=30)
    assert marker.exists(), (tmp_path / "job.log").read_text()[-2000:]
    assert code == -signal.SIGKILL
    temporary = Path(marker.read_text())
    assert temporary.exists() and temporary.stat().st_size > 0  # written and fsynced, never renamed
    for root in ("ckpt", "best"):
        for name in os.listdir(tmp_path / root):
            if name.endswith(".ckpt"):
                safe_load(str(tmp_path / root / name))  # complete: loads, checksums verified
    marker.unlink()
    resumed = ckpt_job.run(str(tmp_path), resume=True)
    assert same(resumed["module"], reference["module"])
    assert not temporary.exists()


# -- 6. disk full during a background save ----------------------------------------------------------------------
def test_a_full_disk_during_a_background_save_is_a_clear_error_keeping_the_previous_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """User sees: a CheckpointError at the next save, naming the file, "no space left on the device", the free
    and the needed space, and that the previous file is intact. Kept: the previous checkpoint (it loads, and a
    fit resumes from it); no temporary file; the trained weights in memory."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the disk fills up while the writer thread writes step 4's file
        if threading.current_thread().name == "ember-checkpoint-writer" and \
                "epoch=1-step=4.ckpt" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    folder = tmp_path / "ck"
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=3, logger=False, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[ModelCheckpoint(dirpath=folder, every_n_train_steps=2)])
    with pytest.raises(ember.CheckpointError) as info:
        trainer.fit(model, *tiny_loaders(n=16))
    monkeypatch.undo()
    message = str(info.value)
    assert f"cannot write {folder / 'epoch=1-step=4.ckpt'}: no space left on the device" in message, message
    assert "The previous file at this path, if any, is intact" in message
    assert sorted(os.listdir(folder)) == ["epoch=0-step=2.ckpt", "last.ckpt"]  # no temporary left
    assert safe_load(str(folder / "last.ckpt"))["global_step"] == 2
    assert trainer.global_step >= 4
    resumed = ember.Trainer(max_epochs=3, logger=False, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[ModelCheckpoint(dirpath=folder, every_n_train_steps=2)])
    resumed.fit(TinyClassifier(), *tiny_loaders(n=16), ckpt_path=str(folder / "last.ckpt"))
    assert resumed.global_step == 6
