"""Checkpoints written in the background: a consistent snapshot, one write in flight, every write flushed, failures
raised on the training thread naming the file, ``last.ckpt`` linked rather than pickled again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.core.checkpointing.async_writer import BackgroundWriter, SnapshotBuffers, snapshot
from ember.core.checkpointing.checkpoint_format import read, storage_manager
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io import torch_file
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO, atomic_link, safe_load
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False}


class Watch:
    """Records on which thread each file is written, how many writes overlap, and how far training got
    while a write was running; can hold the first write until training has taken ``hold_for`` more steps."""

    identity = "test.watch"

    def __init__(self, hold_for: int = 0, fail_on: str | None = None) -> None:
        self.hold_for, self.fail_on = hold_for, fail_on
        self.threads: list[tuple[str, str]] = []
        self.active = self.most_active = 0
        self.steps_during_write: list[int] = []
        self.weights_at_save: dict[int, dict[str, torch.Tensor]] = {}
        self._steps = 0
        self._stepped = threading.Condition()

    def on_train_batch_end(self, trainer: Any) -> None:
        with self._stepped:
            self._steps += 1
            self._stepped.notify_all()

    def on_save_checkpoint(self, trainer: Any, checkpoint: dict) -> None:
        self.weights_at_save[trainer.global_step] = {k: v.clone() for k, v in trainer.module.state_dict().items()}

    @ember.hookimpl(wrapper=True)
    def save_checkpoint(self, path: str) -> Generator[None, Any, Any]:
        self.threads.append((os.path.basename(path), threading.current_thread().name))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        start = self._steps
        try:
            if self.fail_on is not None and path.endswith(self.fail_on):
                raise OSError(28, "No space left on device")
            if self.hold_for and len(self.threads) == 1:
                with self._stepped:
                    self._stepped.wait_for(lambda: self._steps >= start + self.hold_for, timeout=10)
            return (yield)
        finally:
            self.steps_during_write.append(self._steps - start)
            self.active -= 1


def fit(tmp_path: Path, watch: Watch, epochs: int = 3, **kwargs: Any) -> ember.Trainer:
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1)
    plugins = [watch, *kwargs.pop("plugins", [])]
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), callbacks=[cb], plugins=plugins,
                            **{**QUIET, **kwargs})
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    return trainer


def test_training_goes_on_while_a_snapshot_is_written(tmp_path: Path) -> None:
    watch = Watch(hold_for=2)
    trainer = fit(tmp_path, watch)
    # epoch-end saves ran on the writer thread; the first one was held until training took two more steps
    assert [name for _, name in watch.threads] == ["ember-checkpoint-writer"] * 3
    assert watch.steps_during_write[0] >= 2
    assert watch.most_active == 1
    # the file holds the weights of the moment it was requested, not those of the steps taken meanwhile
    first = safe_load(str(tmp_path / "ck" / "epoch=0-step=4.ckpt"))
    assert first["global_step"] == 4
    for key, value in watch.weights_at_save[4].items():
        assert torch.equal(first["state_dict"][key], value)
    assert not torch.equal(first["state_dict"]["net.0.weight"], trainer.module.state_dict()["net.0.weight"])
    assert not trainer.checkpointing.writer.busy  # flushed when the fit ended


def test_last_is_a_link_to_bytes_already_written(tmp_path: Path) -> None:
    watch = Watch()
    fit(tmp_path, watch, epochs=2)
    ck = tmp_path / "ck"
    assert sorted(os.listdir(ck)) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    assert [file for file, _ in watch.threads] == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]  # pickled once
    assert os.path.samefile(ck / "last.ckpt", ck / "epoch=1-step=8.ckpt")


def test_async_save_false_writes_on_the_training_thread(tmp_path: Path) -> None:
    watch = Watch()
    fit(tmp_path, watch, epochs=2, checkpoint_io=TorchCheckpointIO(async_save=False))
    assert {name for _, name in watch.threads} == {"MainThread"}
    with pytest.raises(TypeError, match="async_save='no'"):
        TorchCheckpointIO(async_save="no")  # type: ignore[arg-type]


def test_a_failed_background_write_is_raised_on_the_training_thread_naming_the_file(tmp_path: Path) -> None:
    watch = Watch(fail_on="epoch=0-step=4.ckpt")
    with pytest.raises(ember.CheckpointError, match=r"writing .*epoch=0-step=4\.ckpt in the background failed: "
                                                    r"OSError: .*No space left on device") as info:
        fit(tmp_path, watch)
    assert isinstance(info.value.__cause__, OSError)
    assert not (tmp_path / "ck" / "epoch=0-step=4.ckpt").exists()
    assert [name for _, name in watch.threads] == ["ember-checkpoint-writer"]  # failed there; nothing after it


class FailsInEpoch(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.current_epoch == 1 and batch_idx == 1:
            raise RuntimeError("bad batch")
        return super().training_step(batch, batch_idx)


def test_an_exception_in_training_flushes_the_pending_write_first(tmp_path: Path) -> None:
    watch = Watch(hold_for=1)  # the epoch-0 write is still running when the step raises
    cb = ModelCheckpoint(dirpath=tmp_path / "ck")
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), callbacks=[cb], plugins=[watch], **QUIET)
    with pytest.raises(RuntimeError, match="bad batch"):
        trainer.fit(FailsInEpoch(), tiny_loaders(n=32)[0])
    assert not trainer.checkpointing.writer.busy
    assert safe_load(str(tmp_path / "ck" / "last.ckpt"))["global_step"] == 4


def test_save_checkpoint_outside_a_fit_is_written_before_it_returns(tmp_path: Path) -> None:
    watch = Watch()
    trainer = fit(tmp_path, watch, epochs=1)
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert watch.threads[-1] == ("after.ckpt", "MainThread")
    assert safe_load(str(tmp_path / "after.ckpt"))["global_step"] == 4


def test_snapshot_copies_every_tensor_and_keeps_structure() -> None:
    shared = torch.arange(4.0)
    state: OrderedDict[str, Any] = OrderedDict(w=shared, again=shared, b=torch.ones(2))
    state._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    obj = {"state_dict": state, "opt": [{"step": torch.tensor(3.0), "betas": (0.9, 0.99)}], "epoch": 2}
    buffers = SnapshotBuffers()
    copy = snapshot(obj, buffers)
    assert copy["state_dict"]._metadata == {"": {"version": 1}} and type(copy["state_dict"]) is OrderedDict
    assert copy["state_dict"]["w"] is copy["state_dict"]["again"]  # one tensor stays one tensor
    assert copy["opt"][0]["betas"] == (0.9, 0.99) and copy["epoch"] == 2
    shared.add_(100)
    obj["opt"][0]["step"].add_(1)
    assert torch.equal(copy["state_dict"]["w"], torch.arange(4.0))
    assert copy["opt"][0]["step"].item() == 3.0
    buffer = copy["state_dict"]["b"]
    assert snapshot(obj, buffers)["state_dict"]["b"] is buffer  # host buffers are reused from save to save
    view = {"expanded": torch.arange(3.0).expand(2, 3), "strided": torch.arange(6.0).view(2, 3).t()}
    copied = snapshot(view, buffers)
    assert all(torch.equal(copied[k], view[k]) for k in view)


def test_reading_a_checkpoint_waits_for_its_background_write(tmp_path: Path) -> None:
    path = str(tmp_path / "slow.ckpt")
    writer = BackgroundWriter()

    def job(at: Any) -> None:
        at(path)
        time.sleep(0.3)
        torch_file.atomic_save({"format_version": 2, "state_dict": {"w": torch.ones(3)}}, path)

    writer.submit(job)
    checkpoint = read(storage_manager(), None, path, True)  # no "no checkpoint at" error: the write finished first
    assert torch.equal(checkpoint["state_dict"]["w"], torch.ones(3))
    assert not writer.busy


def test_the_interpreter_waits_for_a_background_write_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "exit.ckpt"
    script = (
        "import time, torch\n"
        "from ember.core.checkpointing.async_writer import BackgroundWriter\n"
        "from ember.plugins.checkpoint_io.torch_file import atomic_save\n"
        "w = BackgroundWriter()\n"
        f"w.submit(lambda at: (time.sleep(0.3), atomic_save({{'x': torch.ones(2)}}, {str(path)!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.ones(2))


def test_link_falls_back_to_a_copy_of_the_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "a.ckpt"
    torch_file.atomic_save({"x": torch.arange(5)}, str(source))
    atomic_link(str(source), str(tmp_path / "hard.ckpt"))
    assert os.path.samefile(source, tmp_path / "hard.ckpt")

    def no_links(src: str, dst: str) -> None:  # a file system without hard links (cannot be made here)
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    atomic_link(str(source), str(tmp_path / "copy.ckpt"))
    assert not os.path.samefile(source, tmp_path / "copy.ckpt")
    assert (tmp_path / "copy.ckpt").read_bytes() == source.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["a.ckpt", "copy.ckpt", "hard.ckpt"]  # no temporary left


def test_linking_the_same_source_again_leaves_no_temporary(tmp_path: Path) -> None:
    source = tmp_path / "a.ckpt"
    torch_file.atomic_save({"x": torch.arange(5)}, str(source))
    for _ in range(3):  # the second and third find last.ckpt already a link to a.ckpt
        atomic_link(str(source), str(tmp_path / "last.ckpt"))
    assert os.path.samefile(source, tmp_path / "last.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["a.ckpt", "last.ckpt"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_snapshot_of_device_tensors_goes_to_pinned_host_memory() -> None:
    weight = torch.randn(256, 256, device="cuda")
    before = weight.clone()  # queued on the stream, no host sync ((w + 1) - 1 is not w in floating point)
    copy = snapshot({"w": weight}, SnapshotBuffers())["w"]
    assert copy.device.type == "cpu" and copy.is_pinned()
    weight.add_(1)  # queued after the copy: the snapshot must still hold the values before it
    torch.cuda.synchronize()
    assert torch.equal(copy, before.cpu())


def test_one_writer_thread_serves_successive_saves_until_closed() -> None:
    writer = BackgroundWriter()
    threads: list[threading.Thread] = []
    for _ in range(3):
        writer.submit(lambda at: threads.append(threading.current_thread()))
    writer.wait()
    assert len(threads) == 3 and len(set(threads)) == 1 and threads[0] is not threading.main_thread()
    assert writer.running
    writer.close()  # joined, not left to time out
    assert not threads[0].is_alive() and not writer.running
    writer.submit(lambda at: threads.append(threading.current_thread()))  # a later fit starts another
    writer.close()
    assert threads[-1] is not threads[0] and not threads[-1].is_alive()


def ember_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ember")]


@pytest.mark.parametrize("how", ["returns", "raises"])
def test_no_writer_thread_outlives_its_fit(tmp_path: Path, how: str) -> None:
    before = ember_threads()
    if how == "returns":
        trainer = fit(tmp_path, Watch())
    else:
        trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), **QUIET)
        with pytest.raises(RuntimeError, match="bad batch"):
            trainer.fit(FailsInEpoch(), tiny_loaders(n=32)[0])
    assert any(name.endswith(".ckpt") for name in os.listdir(trainer.checkpoint_callback.dirpath))
    assert not trainer.checkpointing.writer.running
    assert ember_threads() == before


class AnswersSaves:
    """A plugin that answers save_checkpoint itself (like a sharded strategy), then lets the storage write."""

    identity = "test.answers-saves"

    def __init__(self, async_save: bool | None) -> None:
        if async_save is not None:
            self.async_save = async_save
        self.threads: list[str] = []

    @ember.hookimpl(tryfirst=True)
    def save_checkpoint(self) -> None:
        self.threads.append(threading.current_thread().name)


# Undeclared: written on the training thread, and last.ckpt written through the hook too (no link: the plugin may
# write something other than the storage's file, e.g. a sharded directory, collectively on every process).
@pytest.mark.parametrize(("declared", "threads"), [(None, ["MainThread"] * 4), (False, ["MainThread"] * 4),
                                                   (True, ["ember-checkpoint-writer"] * 2)])
def test_writes_stay_on_the_training_thread_unless_every_plugin_answering_saves_allows_it(
        tmp_path: Path, declared: bool | None, threads: list[str]) -> None:
    plugin = AnswersSaves(declared)
    fit(tmp_path, Watch(), epochs=2, plugins=[plugin])
    assert plugin.threads == threads


class HeldStorage(TorchCheckpointIO):
    """The default storage, recording on which thread checkpoints are serialised and written; the first write
    is held until training has taken ``hold_for`` more steps (counted by the ``on_train_batch_end`` hook)."""

    def __init__(self, hold_for: int = 0) -> None:
        super().__init__()
        self.hold_for = hold_for
        self.serialized: list[str] = []
        self.written: list[tuple[str, str, int]] = []
        self.weights_at_save: dict[int, dict[str, torch.Tensor]] = {}
        self.steps = 0
        self._stepped = threading.Condition()

    @ember.hookimpl
    def on_train_batch_end(self) -> None:
        with self._stepped:
            self.steps += 1
            self._stepped.notify_all()

    @ember.hookimpl
    def on_save_checkpoint(self, trainer: Any) -> None:
        self.weights_at_save[trainer.global_step] = {k: v.clone() for k, v in trainer.module.state_dict().items()}

    def serialize_checkpoint(self, checkpoint: dict) -> Any:
        self.serialized.append(threading.current_thread().name)
        return super().serialize_checkpoint(checkpoint)

    def hold_writes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Record (and hold, see above) the writes of serialised checkpoints."""
        write = torch_file.atomic_write_bytes

        def held(data: Any, path: str) -> None:
            start = self.steps
            if self.hold_for and not self.written:
                with self._stepped:
                    self._stepped.wait_for(lambda: self.steps >= start + self.hold_for, timeout=10)
            self.written.append((os.path.basename(path), threading.current_thread().name, self.steps - start))
            write(data, path)

        monkeypatch.setattr(torch_file, "atomic_write_bytes", held)


def test_on_the_cpu_the_training_thread_serialises_and_the_writer_only_writes(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing wraps save_checkpoint: the checkpoint is serialised at the safe point (its bytes are the snapshot)
    # and the background thread writes, fsyncs and renames them.
    storage = HeldStorage(hold_for=2)
    storage.hold_writes(monkeypatch)
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1, save_last=True)
    trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), callbacks=[cb], checkpoint_io=storage,
                            **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert storage.serialized == ["MainThread"] * 3
    assert [(file, thread) for file, thread, _ in storage.written] == [
        (f"epoch={e}-step={4 * (e + 1)}.ckpt", "ember-checkpoint-writer") for e in range(3)]
    assert storage.written[0][2] >= 2  # training went on while the first file was written
    first = safe_load(str(tmp_path / "ck" / "epoch=0-step=4.ckpt"))
    for key, value in storage.weights_at_save[4].items():  # the weights of the moment it was requested
        assert torch.equal(first["state_dict"][key], value)
    assert not torch.equal(first["state_dict"]["net.0.weight"], trainer.module.state_dict()["net.0.weight"])
    assert os.path.samefile(tmp_path / "ck" / "last.ckpt", tmp_path / "ck" / "epoch=2-step=12.ckpt")


class OwnFormat(TorchCheckpointIO):
    """A storage that changes how files are written: its save_checkpoint must see every checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[str] = []

    @ember.hookimpl
    def save_checkpoint(self, trainer: Any, checkpoint: Any, path: str) -> bool:
        assert isinstance(checkpoint, dict)
        self.saved.append(os.path.basename(path))
        return super().save_checkpoint(trainer, checkpoint, path)


def test_a_storage_that_writes_its_own_way_or_a_wrapper_keeps_the_checkpoint_as_a_dict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = OwnFormat()
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), checkpoint_io=storage,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "own")], **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert storage.saved == ["epoch=0-step=4.ckpt", "last.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]  # no links
    assert safe_load(str(tmp_path / "own" / "last.ckpt"))["global_step"] == 8
    held = HeldStorage()
    held.hold_writes(monkeypatch)
    watch = Watch()  # wraps save_checkpoint, so it is called with the checkpoint, on the writer thread
    fit(tmp_path, watch, epochs=2, checkpoint_io=held)
    assert held.serialized == [] and held.written == []
    assert [name for _, name in watch.threads] == ["ember-checkpoint-writer"] * 2


def test_a_checkpoint_over_the_inline_limit_is_snapshotted_and_serialised_by_the_writer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.core.checkpointing import checkpoint_writes

    assert checkpoint_writes.small_enough({"w": torch.zeros(256)}, limit=1024)  # 1024 bytes
    assert not checkpoint_writes.small_enough({"w": [torch.zeros(200), torch.zeros(100)]}, limit=1024)
    # Every container kind a checkpoint holds counts, at any depth; numbers, strings, dtypes count nothing.
    nested = OrderedDict(a=1, b="x", c=[{"d": (torch.zeros(100), torch.float32, None)}], e=torch.zeros(100))
    assert checkpoint_writes.small_enough(nested, limit=800)
    assert not checkpoint_writes.small_enough(nested, limit=799)
    # A view is written with its whole storage: that is what counts.
    assert not checkpoint_writes.small_enough({"view": torch.zeros(1000)[:10]}, limit=1024)
    assert not checkpoint_writes.small_enough(torch.zeros(300), limit=1024)
    monkeypatch.setattr(checkpoint_writes, "SERIALIZE_INLINE_BYTES", 1024)  # the tiny model's checkpoint is larger
    storage = HeldStorage()
    storage.hold_writes(monkeypatch)
    saved: list[str] = []
    save = torch_file.atomic_save
    monkeypatch.setattr(torch_file, "atomic_save",
                        lambda obj, path: (saved.append(threading.current_thread().name), save(obj, path)))
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), checkpoint_io=storage,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck")], **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert storage.serialized == [] and storage.written == []
    assert saved == ["ember-checkpoint-writer"] * 2
    assert safe_load(str(tmp_path / "ck" / "last.ckpt"))["global_step"] == 8


def test_the_size_walk_runs_again_only_after_a_checkpoint_that_was_not_well_under_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk that decides between serialising at the safe point and snapshotting is left out while the last
    checkpoint serialised at the safe point weighed at most half the limit; a checkpoint that grew past it is
    serialised there once, and the next save walks again (and snapshots)."""
    from ember.core.checkpointing import checkpoint_writes

    walks: list[bool] = []
    real = checkpoint_writes.small_enough
    monkeypatch.setattr(checkpoint_writes, "small_enough",
                        lambda obj, limit=None: walks.append(real(obj, limit)) or walks[-1])
    monkeypatch.setattr(checkpoint_writes, "SERIALIZE_INLINE_BYTES", 200_000)  # the tiny model's: a few KB
    paths: list[str] = []
    write_bytes, save = torch_file.atomic_write_bytes, torch_file.atomic_save
    monkeypatch.setattr(torch_file, "atomic_write_bytes", lambda data, path: (paths.append("serialised at the "
                        "safe point"), write_bytes(data, path)))
    monkeypatch.setattr(torch_file, "atomic_save", lambda obj, path: (paths.append("snapshot"), save(obj, path)))

    class Growing(ember.Callback):
        saves = 0

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
            Growing.saves += 1
            if Growing.saves >= 3:  # from the third save on, 400 KB more
                checkpoint["big"] = torch.zeros(100_000)

    trainer = ember.Trainer(max_epochs=5, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck"), Growing()])
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert paths == ["serialised at the safe point"] * 3 + ["snapshot"] * 2
    assert walks == [True, False, False]  # the first save's, then after the grown one (400 KB), and the next
    assert safe_load(str(tmp_path / "ck" / "last.ckpt"))["big"].shape == (100_000,)


# -- the writer process ---------------------------------------------------------------------------------------
def process_fit(tmp_path: Path, epochs: int = 3) -> ember.Trainer:
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=2, monitor="step", mode="max")
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), callbacks=[cb],
                            checkpoint_io=TorchCheckpointIO(writer="process"), **QUIET)
    ember.seed_everything(0)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    return trainer


@pytest.mark.slow
def test_the_writer_process_writes_what_the_thread_writes_and_ends_with_the_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    from ember.core.checkpointing import writer_process

    sent: list[bool] = []
    submit = writer_process.WriterProcess.submit
    monkeypatch.setattr(writer_process.WriterProcess, "submit", lambda self, ops: sent.append(submit(self, ops))
                        or sent[-1])
    before = ember_threads()
    trainer = process_fit(tmp_path / "p")
    assert sent and all(sent)  # every save went to the process
    assert not trainer.checkpointing.writer.running and multiprocessing.active_children() == []
    assert ember_threads() == before
    files = sorted(os.listdir(tmp_path / "p" / "ck"))
    assert files == ["epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]  # removals done in order
    assert os.path.samefile(tmp_path / "p" / "ck" / "last.ckpt", tmp_path / "p" / "ck" / "epoch=2-step=12.ckpt")
    cb = ModelCheckpoint(dirpath=tmp_path / "t" / "ck", save_top_k=2, monitor="step", mode="max")
    ember.seed_everything(0)
    ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path / "t"), callbacks=[cb], **QUIET).fit(
        TinyClassifier(), tiny_loaders(n=32)[0])
    for name in files:
        by_process, by_thread = (safe_load(str(tmp_path / d / "ck" / name)) for d in ("p", "t"))
        assert by_process.keys() == by_thread.keys()
        for key in ("state_dict", "optimizer_states", "loops", "global_step"):
            assert str(by_process[key]) == str(by_thread[key])
        assert all(torch.equal(by_process["state_dict"][k], v) for k, v in by_thread["state_dict"].items())


def test_the_writer_process_starts_as_the_fit_begins_and_serves_its_first_save(tmp_path: Path) -> None:
    """The process is started when a fit that checkpoints begins, not by its first save (whose job would otherwise
    wait for the start, and the second save for both): it runs before the first batch ends, that one process
    writes every save, and a fit that saves nothing starts none and still ends with no process left."""
    import multiprocessing

    seen: list[Any] = []

    class Look(ember.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            process = trainer.checkpointing.writer.process
            if not seen:  # the first batch: no save has happened yet
                assert process is not None and process.alive
                deadline = time.monotonic() + 60
                while process.pid is None and time.monotonic() < deadline:  # the start completes
                    time.sleep(0.005)
            seen.append(process.pid)

    cb = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1)
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), callbacks=[cb, Look()],
                            checkpoint_io=TorchCheckpointIO(writer="process"), **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=32)[0])
    assert len(set(seen)) == 1 and seen[0] is not None
    assert sorted(os.listdir(tmp_path / "ck")) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    assert not trainer.checkpointing.writer.running and multiprocessing.active_children() == []
    off = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path / "off"), enable_checkpointing=False,
                        checkpoint_io=TorchCheckpointIO(writer="process"), **QUIET)
    off.fit(TinyClassifier(), tiny_loaders(n=16)[0])
    assert off.checkpointing.writer.process is None and multiprocessing.active_children() == []


def test_a_dead_writer_process_is_reported_once_and_the_fit_writes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from ember.core.checkpointing import writer_process

    monkeypatch.setattr(writer_process, "child_setup", os.abort)  # dies before it answers the first job
    with caplog.at_level("WARNING", logger="ember"):
        process_fit(tmp_path)
    assert [r.getMessage() for r in caplog.records].count(
        next(r.getMessage() for r in caplog.records if "writer process ended" in r.getMessage())) == 1
    assert sorted(os.listdir(tmp_path / "ck")) == ["epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]
    assert safe_load(str(tmp_path / "ck" / "last.ckpt"))["global_step"] == 12


@pytest.mark.parametrize("error", [RuntimeError("An attempt has been made to start a new process before ..."),
                                   OSError(11, "Resource temporarily unavailable")], ids=["spawn bootstrap", "no fork"])
def test_a_writer_process_that_cannot_start_leaves_the_writes_to_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception) -> None:
    from ember.core.checkpointing import writer_process

    def cannot_start(self: Any) -> None:
        raise error

    monkeypatch.setattr(writer_process.WriterProcess, "_start", cannot_start)
    with caplog.at_level("WARNING", logger="ember"):
        trainer = process_fit(tmp_path)
    assert [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()] == [
        f"the checkpoint writer process could not start ({type(error).__name__}: {error}); writing its checkpoint in "
        "the training process, and the rest of this fit's checkpoints on a writer thread"]
    assert not trainer.checkpointing.writer.running
    assert sorted(os.listdir(tmp_path / "ck")) == ["epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]
    assert safe_load(str(tmp_path / "ck" / "last.ckpt"))["global_step"] == 12


UNGUARDED = """
import os, sys
import ember
from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO
from ember.testing import TinyClassifier, tiny_loaders
print("script body runs in", os.getpid(), flush=True)
trainer = ember.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=sys.argv[1],
                        checkpoint_io=TorchCheckpointIO(writer="process"))
trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
"""


@pytest.mark.slow
def test_a_script_without_a_main_guard_trains_once_and_says_why_no_writer_process(tmp_path: Path) -> None:
    """A new process imports the script again (as multiprocessing does): without ``if __name__ == "__main__":``
    that import would run the whole training a second time; the writer process is not started, and the script's
    line is named."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("script body runs in") == 1
    assert f"line 10 of {script} runs the fit outside an `if __name__ == \"__main__\":` block" in done.stderr
    assert "on a writer thread" in done.stderr
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == ["epoch=1-step=4.ckpt", "last.ckpt"]


def test_the_main_guard_is_found_around_the_running_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.core.checkpointing import script_guard

    script = tmp_path / "s.py"
    script.write_text("import x\n\nif '__main__' == __name__:\n    run()\nrun()\n")
    main = type(sys)("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    for line, expected in ((4, None), (5, 5)):
        code = compile("\n" * (line - 1) + "found = unguarded()", str(script), "exec")
        vars(main)["unguarded"] = script_guard.unguarded_script_line
        exec(code, vars(main))
        assert vars(main)["found"] == expected
    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))  # an interactive session: no file
    assert script_guard.unguarded_script_line() is None


def test_a_script_is_parsed_once_for_its_main_guard_until_it_changes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fit asks where the script's ``if __name__ == "__main__":`` blocks are; the script is parsed once, and
    again only when the file changed."""
    from ember.core.checkpointing import script_guard

    parsed: list[str] = []
    parse = script_guard.ast.parse
    monkeypatch.setattr(script_guard.ast, "parse", lambda source: parsed.append(source) or parse(source))
    script = tmp_path / "s.py"
    script.write_text("import x\n\nif __name__ == '__main__':\n    run()\n")
    assert script_guard._main_guards(str(script)) == ((3, 4),)
    assert script_guard._main_guards(str(script)) == ((3, 4),) and len(parsed) == 1
    script.write_text("import x\nrun()\n\n\nif __name__ == '__main__':\n    run()\n    run()\n")
    assert script_guard._main_guards(str(script)) == ((5, 7),) and len(parsed) == 2
    assert script_guard._main_guards(str(tmp_path / "gone.py")) is None


def no_space_left() -> None:
    """Runs in the writer process: every fsync fails as on a full disk."""
    def fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    os.fsync = fsync


def test_a_full_disk_in_the_writer_process_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.core.checkpointing import writer_process

    monkeypatch.setattr(writer_process, "child_setup", no_space_left)
    with pytest.raises(ember.CheckpointError, match=r"(?i)epoch=0-step=4\.ckpt.*(disk|space)"):
        process_fit(tmp_path)
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path / "ck"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_writer_process_saves_a_cuda_fit_exactly(tmp_path: Path) -> None:
    """The safe point copies device tensors into the shared buffer; the file holds the weights as they were."""
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)
    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), callbacks=[cb],
                            checkpoint_io=TorchCheckpointIO(writer="process"),
                            **{**QUIET, "accelerator": "cuda", "devices": 1})
    model = TinyClassifier()
    trainer.fit(model, tiny_loaders(n=32)[0])
    saved = safe_load(str(tmp_path / "ck" / "last.ckpt"))
    assert saved["global_step"] == trainer.global_step
    for name, value in model.state_dict().items():
        assert saved["state_dict"][name].device.type == "cpu"
        assert torch.equal(saved["state_dict"][name], value.cpu()), name
