"""Stopping a fit on a signal: a checkpoint at the next safe point, then SignalExit with 128 + signum."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.loop.signals import SignalExit, exit_code, request_stop
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.testing import TinyClassifier, tiny_dataset

#: No progress bar, model summary or logger files: only what the test is about.
QUIET = {"accelerator": "cpu",
         "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}



class SendAt:
    """Sends a signal to this process (or calls a function) before the given global batch."""

    def __init__(self, at: int, action: Any) -> None:
        self.at, self.action, self.seen = at, action, 0

    def on_train_batch_start(self, trainer: Any) -> None:
        if self.seen == self.at:
            self.action(trainer)
        self.seen += 1


def make(tmp_path: Path, *plugins: Any, **kwargs: Any) -> ember.Trainer:
    args = {"max_epochs": 3, "default_root_dir": str(tmp_path), **QUIET, **kwargs}
    return ember.Trainer(plugins=list(plugins), **args)


def data() -> DataLoader:
    return DataLoader(tiny_dataset(40), batch_size=4, shuffle=True)


def test_sigint_saves_after_the_batch_and_raises_keyboard_interrupt(tmp_path: Path) -> None:
    torn = []

    class Teardown:  # a Lightning-style callback: no teardown after an exception, as in Lightning
        def teardown(self, stage: str) -> None:
            torn.append(("callback", stage))

    class Releases:  # a plugin marked @hookimpl still releases what it holds
        @ember.hookimpl
        def teardown(self, stage: str) -> None:
            torn.append(("plugin", stage))

    before = signal.getsignal(signal.SIGINT)
    trainer = make(tmp_path, SendAt(13, lambda t: os.kill(os.getpid(), signal.SIGINT)), Teardown(), Releases())
    model = TinyClassifier()
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.fit(model, data())
    assert type(info.value) is KeyboardInterrupt and exit_code(signal.SIGINT) == 130
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert info.value.checkpoint_path == str(last)
    progress = safe_load(str(last))["loops"]["fit"]
    assert (progress["phase"], progress["epoch"], progress["batch_idx"], progress["global_step"]) == \
        ("batch", 1, 3, 14)
    assert trainer.interrupted and trainer.state["status"] == "interrupted"
    assert torn == [("plugin", "fit")]
    assert signal.getsignal(signal.SIGINT) is before  # handlers put back
    saved = safe_load(str(last))["state_dict"]  # the weights stay in memory, as saved
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


def test_resume_after_sigterm_is_exact(tmp_path: Path) -> None:
    ember.seed_everything(3)
    ref = TinyClassifier()
    make(tmp_path / "ref").fit(ref, data())
    ember.seed_everything(3)
    with pytest.raises(SignalExit) as info:
        make(tmp_path / "run", SendAt(6, lambda t: os.kill(os.getpid(), signal.SIGTERM))).fit(TinyClassifier(), data())
    assert info.value.code == 143
    ember.seed_everything(3)
    model = TinyClassifier()
    make(tmp_path / "run").fit(model, data(), ckpt_path="last")
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), model.state_dict().values(), strict=True))


def test_stop_waits_for_the_end_of_the_accumulation_window(tmp_path: Path) -> None:
    trainer = make(tmp_path, SendAt(4, lambda t: request_stop(t)), accumulate_grad_batches=4)
    with pytest.raises(SignalExit) as info:
        trainer.fit(TinyClassifier(), data())
    assert info.value.code == 143
    ckpt = safe_load(str(tmp_path / "checkpoints" / "last.ckpt"))
    assert ckpt["loops"]["fit"]["batch_idx"] == 7  # asked during batch 4, window 4..7
    assert "grads" not in ckpt


def test_request_stop_calls_the_requeue_hook(tmp_path: Path) -> None:
    calls = []

    class Cluster:
        identity = "environment.fake"

        @ember.hookimpl
        def requeue(self, trainer: Any, signum: int, checkpoint_path: str, requested: bool) -> bool:
            calls.append((signum, os.path.basename(checkpoint_path), requested, os.path.exists(checkpoint_path)))
            return True

    trainer = make(tmp_path, Cluster(), SendAt(2, lambda t: request_stop(t, signal.SIGUSR1, requeue=True)))
    with pytest.raises(SignalExit) as info:
        trainer.fit(TinyClassifier(), data())
    assert info.value.code == 128 + signal.SIGUSR1
    assert calls == [(signal.SIGUSR1, "last.ckpt", True, True)]


def test_second_sigint_interrupts_at_once(tmp_path: Path) -> None:
    def twice(trainer: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    trainer = make(tmp_path, SendAt(3, twice))
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.fit(TinyClassifier(), data())
    assert not hasattr(info.value, "checkpoint_path")  # raised at once, not at a safe point
    assert trainer.interrupted
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


def test_signal_after_the_last_safe_point_still_saves_and_exits(tmp_path: Path) -> None:
    class LateSignal:
        def on_train_end(self, trainer: Any) -> None:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer = make(tmp_path, LateSignal(), max_epochs=1)
    with pytest.raises(SignalExit):
        trainer.fit(TinyClassifier(), data())
    assert safe_load(str(tmp_path / "checkpoints" / "last.ckpt"))["global_step"] == 10


def test_handlers_with_or_without_checkpointing_but_not_off_the_main_thread(tmp_path: Path) -> None:
    seen = []

    class Probe:
        def on_train_start(self, trainer: Any) -> None:
            seen.append(signal.getsignal(signal.SIGTERM))

    make(tmp_path, Probe(), max_epochs=1, enable_checkpointing=False).fit(TinyClassifier(), data())
    thread = threading.Thread(target=lambda: make(tmp_path, Probe(), max_epochs=1).fit(TinyClassifier(), data()))
    thread.start()
    thread.join()
    make(tmp_path, Probe(), max_epochs=1).fit(TinyClassifier(), data())
    default = signal.getsignal(signal.SIGTERM)
    assert seen[1] is default
    assert seen[0] is not default and seen[2] is not default


def test_ctrl_c_without_checkpointing_still_stops_and_raises(tmp_path: Path) -> None:
    events = []

    class OnException:
        def on_exception(self, exception: BaseException) -> None:
            events.append(type(exception).__name__)

    trainer = make(tmp_path, SendAt(5, lambda t: os.kill(os.getpid(), signal.SIGINT)), OnException(),
                   enable_checkpointing=False)
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.fit(TinyClassifier(), data())
    assert info.value.checkpoint_path is None  # type: ignore[attr-defined]
    assert events == ["KeyboardInterrupt"] and trainer.global_step == 6  # the batch in flight finished
    assert not (tmp_path / "checkpoints").exists()


def test_a_stop_writes_every_last_checkpoint_and_last_reads_the_newest(tmp_path: Path) -> None:
    from ember.plugins.callbacks import ModelCheckpoint

    def callbacks() -> list[Any]:
        return [ModelCheckpoint(dirpath=tmp_path / "epochs", save_top_k=0),
                ModelCheckpoint(dirpath=tmp_path / "steps", every_n_train_steps=3, save_top_k=0)]

    trainer = make(tmp_path, SendAt(15, lambda t: request_stop(t)), callbacks=callbacks())
    with pytest.raises(SignalExit):
        trainer.fit(TinyClassifier(), data())
    epochs, steps = (safe_load(str(tmp_path / d / "last.ckpt")) for d in ("epochs", "steps"))
    assert epochs["global_step"] == steps["global_step"] == 16  # both hold the state at the stop
    resumed = make(tmp_path, callbacks=callbacks(), max_epochs=2)
    ember.seed_everything(0)
    older = tmp_path / "epochs" / "last.ckpt"
    assert os.path.samefile(older, tmp_path / "steps" / "last.ckpt")  # one moment: written once, linked
    older.unlink()
    older.write_bytes((tmp_path / "steps" / "last.ckpt").read_bytes())
    os.utime(older, (1, 1))  # make the other one the newer
    resumed.fit(TinyClassifier(), data(), ckpt_path="last")
    assert resumed.ckpt_path == str(tmp_path / "steps" / "last.ckpt")


def test_processes_agree_on_stopping_every_few_batches(tmp_path: Path) -> None:
    """With several processes, a stop is decided collectively (reduce_boolean_decision, any process) at every
    SIGNAL_SYNC_EVERY-th safe point, so all processes stop after the same batch."""
    from ember.core.checkpointing.checkpoint import SIGNAL_SYNC_EVERY

    decisions: list[bool] = []

    class TwoProcesses:
        """Process 0 of a pretend two-process job whose other process received the signal before batch 3."""

        identity = "test.two-processes"

        @ember.hookimpl
        def distributed_info(self) -> dict:
            return {"global_rank": 0, "local_rank": 0, "node_rank": 0, "world_size": 2}

        @ember.hookimpl
        def reduce_boolean_decision(self, trainer: Any, decision: bool, all: bool) -> bool:
            decisions.append(decision)
            return decision or (not all and trainer.loop.progress.batches_seen > 3)

    with pytest.raises(SignalExit) as info:
        make(tmp_path, TwoProcesses()).fit(TinyClassifier(), data())
    assert info.value.code == 143
    assert decisions == [False]  # one collective; this process had no signal itself
    # Safe points: before the first epoch, then after each batch; the 8th is after batch 6.
    progress = safe_load(str(tmp_path / "checkpoints" / "last.ckpt"))["loops"]["fit"]
    assert (progress["epoch"], progress["batch_idx"]) == (0, SIGNAL_SYNC_EVERY - 2)
