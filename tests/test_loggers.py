"""The logger plugins: what lands in metrics.csv, hparams.yaml and TensorBoard event files, read back with
their own readers."""

from __future__ import annotations

import csv
import os
import sys
import textwrap

import pytest
import torch
import yaml

import ember
from ember.core.hooks import discovery
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


class StepLogger(TinyClassifier):
    """Logs values that encode where they were logged, so the files can be checked exactly."""

    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters()

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        # the step this batch's optimizer step will produce, times 10, plus the epoch
        self.log("tag", float((self.global_step + 1) * 10 + self.current_epoch))
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_tag", float(100 + self.current_epoch))


def read_rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_rows_hold_each_value_at_its_step(tmp_path):
    train, val = tiny_loaders(n=40, batch_size=8)  # 5 batches per epoch
    trainer = ember.Trainer(max_epochs=2, log_every_n_steps=2, logger="csv", default_root_dir=tmp_path, **QUIET)
    trainer.fit(StepLogger(), train, val)
    path = os.path.join(tmp_path, "ember_logs", "version_0", "metrics.csv")
    assert trainer.logger.metrics_path == path
    rows = read_rows(path)
    step_rows = [(int(r["step"]), int(r["epoch"]), float(r["tag"])) for r in rows if r["tag"]]
    # every 2nd optimizer step, the value logged in that very step
    assert step_rows == [(s, (s - 1) // 5, s * 10 + (s - 1) // 5) for s in (2, 4, 6, 8, 10)]
    epoch_rows = [(int(r["step"]), int(r["epoch"]), float(r["val_tag"])) for r in rows if r["val_tag"]]
    assert epoch_rows == [(5, 0, 100.0), (10, 1, 101.0)]
    with open(os.path.join(tmp_path, "ember_logs", "version_0", "hparams.yaml")) as f:
        assert yaml.safe_load(f) == {"hidden": 16, "lr": 0.1}


def test_only_values_logged_in_the_written_step_are_written(tmp_path):
    class Sometimes(TinyClassifier):
        def training_step(self, batch, batch_idx):
            if batch_idx % 3 == 0:
                self.log("rare", float(batch_idx))
            return super().training_step(batch, batch_idx)

    train, _ = tiny_loaders(n=48, batch_size=8)  # 6 batches
    trainer = ember.Trainer(max_epochs=1, log_every_n_steps=1, logger="csv", default_root_dir=tmp_path, **QUIET)
    trainer.fit(Sometimes(), train)
    rows = read_rows(trainer.logger.metrics_path)
    assert [(int(r["step"]), r["rare"]) for r in rows if r.get("rare")] == [(1, "0.0"), (4, "3.0")]
    assert [int(r["step"]) for r in rows if r["train_loss"]] == [1, 2, 3, 4, 5, 6]


def test_versions_count_up_and_a_later_test_writes_beside_the_fit(tmp_path):
    train, val = tiny_loaders()
    for expected in ("version_0", "version_1"):
        trainer = ember.Trainer(max_epochs=1, logger="csv", default_root_dir=tmp_path, **QUIET)
        trainer.fit(TinyClassifier(), train, val)
        assert os.path.basename(trainer.log_dir) == expected
    trainer.test(dataloaders=val, verbose=False, ckpt_path="best")
    rows = read_rows(os.path.join(tmp_path, "ember_logs", "version_1", "metrics.csv"))
    assert "test_acc" in rows[0] or any(r.get("test_acc") for r in rows)
    assert not os.path.exists(os.path.join(tmp_path, "ember_logs", "version_2"))


def test_tensorboard_scalars_and_hparams(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train, val = tiny_loaders(n=40, batch_size=8)
    trainer = ember.Trainer(max_epochs=2, log_every_n_steps=2, logger="tensorboard", default_root_dir=tmp_path,
                            **QUIET)
    trainer.fit(StepLogger(), train, val)
    assert [type(lg).__name__ for lg in trainer.loggers] == ["TensorBoardLogger"]
    acc = EventAccumulator(trainer.log_dir)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"tag", "val_tag", "train_loss", "epoch"} <= set(tags)
    assert [(e.step, e.value) for e in acc.Scalars("tag")] == [(s, s * 10 + (s - 1) // 5) for s in (2, 4, 6, 8, 10)]
    assert [(e.step, e.value) for e in acc.Scalars("val_tag")] == [(5, 100.0), (10, 101.0)]
    assert "_hparams_/experiment" in acc.Tags()["tensors"] or acc.summary_metadata
    with open(os.path.join(trainer.log_dir, "hparams.yaml")) as f:
        assert yaml.safe_load(f)["hidden"] == 16


def test_several_loggers_share_one_version_folder(tmp_path):
    train, val = tiny_loaders()
    trainer = ember.Trainer(max_epochs=1, logger=["csv", "tensorboard"], default_root_dir=tmp_path, **QUIET)
    trainer.fit(TinyClassifier(), train, val)
    csv_logger, tb_logger = trainer.loggers
    assert csv_logger.log_dir == tb_logger.log_dir == trainer.log_dir
    files = os.listdir(trainer.log_dir)
    assert "metrics.csv" in files and any(f.startswith("events.out.tfevents") for f in files)


@pytest.mark.parametrize("value", [False, None])
def test_no_logger_means_no_files_and_no_log_hook(tmp_path, value):
    train, val = tiny_loaders()
    # (no always-on plugins: an installed package's own may write files by design)
    trainer = ember.Trainer(max_epochs=1, logger=value, default_root_dir=tmp_path, enable_checkpointing=False,
                            autoload_plugins=False, **QUIET)
    trainer.fit(TinyClassifier(), train, val)
    assert trainer.loggers == [] and trainer.logger is None
    assert trainer.hook.log_metrics is None  # the loop never reads a value for a logger
    assert os.listdir(tmp_path) == []
    assert trainer.log_dir == str(tmp_path)


def test_logger_objects_and_unknown_names(tmp_path):
    from ember.plugins.loggers.csv_logger import CSVLogger

    mine = CSVLogger(save_dir=tmp_path / "elsewhere", name="run", version="first")
    trainer = ember.Trainer(max_epochs=1, logger=mine, default_root_dir=tmp_path, **QUIET)
    trainer.fit(TinyClassifier(), *tiny_loaders())
    assert trainer.log_dir == os.path.join(tmp_path, "elsewhere", "run", "first")
    assert os.path.exists(os.path.join(trainer.log_dir, "metrics.csv"))
    with pytest.raises(ember.UnknownPluginError, match="Did you mean 'tensorboard'"):
        ember.Trainer(accelerator="cpu", logger="tensorbord")
    with pytest.raises(ember.ConfigurationError, match="logger"):
        ember.Trainer(accelerator="cpu", logger=3)


def test_a_third_party_logger_from_an_installed_distribution(tmp_path, monkeypatch):
    """A real distribution on sys.path declaring ``logger.memory``: selected by name like the built-ins."""
    site = tmp_path / "site"
    (site / "memlog").mkdir(parents=True)
    (site / "memlog" / "__init__.py").write_text(textwrap.dedent('''
        import ember

        RECORDS = []

        class MemoryLogger:
            role = "logger"
            identity = "logger.memory"

            @ember.hookimpl
            def log_metrics(self, metrics, step):
                RECORDS.append((step, dict(metrics)))

            @ember.hookimpl
            def log_hyperparams(self, params):
                RECORDS.append(("hparams", dict(params)))
    '''))
    dist = site / "memlog-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: memlog\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ember.plugins]\nlogger.memory = memlog:MemoryLogger\n")
    monkeypatch.syspath_prepend(str(site))
    discovery.discover(refresh=True)
    try:
        trainer = ember.Trainer(max_epochs=1, logger=["csv", "memory"], log_every_n_steps=1,
                                default_root_dir=tmp_path / "out", **QUIET)
        trainer.fit(StepLogger(), *tiny_loaders(n=16, batch_size=8))
        records = sys.modules["memlog"].RECORDS
        assert records[0] == ("hparams", {"hidden": 16, "lr": 0.1})
        assert [(s, m["tag"]) for s, m in records[1:] if "tag" in m] == [(1, 10.0), (2, 20.0)]
        assert trainer.plugin_manager.origins["logger.memory"] == "memlog 1.0"
    finally:
        monkeypatch.undo()
        discovery.discover(refresh=True)


def test_logging_writes_to_the_host_only_when_a_logger_writes(tmp_path, monkeypatch):
    """No host-device synchronisation per step: ember reads values only on the steps a logger writes, one
    read per write (torch's own reads, such as the DataLoader's seed, are not counted)."""
    reads = []
    ember_dir = os.path.dirname(ember.__file__)
    for name in ("item", "tolist", "__float__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(ember_dir):
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    train, _ = tiny_loaders(n=160, batch_size=8)  # 20 batches
    trainer = ember.Trainer(max_epochs=1, log_every_n_steps=5, default_root_dir=tmp_path, **QUIET)
    trainer.fit(TinyClassifier(), train)
    assert reads == ["tolist"] * 4  # steps 5, 10, 15, 20
    reads.clear()
    trainer = ember.Trainer(max_epochs=1, logger=False, default_root_dir=tmp_path, **QUIET)
    trainer.fit(TinyClassifier(), train)
    assert reads == []


def test_hparams_merge_the_datamodules(tmp_path):
    class Data:
        hparams = {"batch_size": 8, "source": "tiny"}

        def train_dataloader(self):
            return tiny_loaders()[0]

    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, **QUIET)
    trainer.fit(StepLogger(hidden=4), datamodule=Data())
    with open(os.path.join(trainer.log_dir, "hparams.yaml")) as f:
        assert yaml.safe_load(f) == {"hidden": 4, "lr": 0.1, "batch_size": 8, "source": "tiny"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_no_device_synchronisation_inside_a_training_step_on_cuda(tmp_path):
    """With the default progress bar and CSV logger on, nothing from a batch's start to its end waits for the
    GPU (torch raises on any synchronising call while the sync debug mode is "error"); the logger's read comes
    after ``on_train_batch_end``, every 4th step."""

    class SyncError:
        @ember.hookimpl(tryfirst=True)
        def on_train_batch_start(self):
            torch.cuda.set_sync_debug_mode("error")

        @ember.hookimpl(trylast=True)
        def on_train_batch_end(self):
            torch.cuda.set_sync_debug_mode("default")

    train, val = tiny_loaders(n=128, batch_size=8)
    trainer = ember.Trainer(max_epochs=1, accelerator="cuda", log_every_n_steps=4, default_root_dir=tmp_path,
                            callbacks=[SyncError()], enable_model_summary=False, num_sanity_val_steps=0)
    try:
        trainer.fit(TinyClassifier(), train, val)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 16
