"""MLflow and W&B loggers run for real (local SQLite store; W&B offline) and are read back with each tool's own
client or file format; skipped when the package is not installed."""

from __future__ import annotations

import glob
import importlib
import os
import re
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

# Imported at collection, not inside a test: importing MLflow adds a finder to sys.meta_path for the process,
# which the suite's leak check would report against whichever test imported it first.
for _name in ("mlflow.tracking", "mlflow.entities", "wandb", "wandb.proto.wandb_internal_pb2"):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass



@pytest.fixture(autouse=True)
def _library_side_effects(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow and W&B set process-wide things of their own when a run starts (a telemetry session variable,
    the W&B service address, an import hook); put them back so no later test sees them."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    env, meta_path = dict(os.environ), list(sys.meta_path)
    yield
    for key in set(os.environ) - set(env):
        os.environ.pop(key, None)
    sys.meta_path[:] = meta_path


FIT = {"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 2, "enable_progress_bar": False,
       "enable_model_summary": False, "enable_checkpointing": False, "num_sanity_val_steps": 0}


class HP(TinyClassifier):
    def __init__(self, lr: float = 0.1, hidden: int = 16) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters()


def fit(logger: Any, root: Path, model: Any = None) -> ember.Trainer:
    ember.seed_everything(0)
    trainer = ember.Trainer(logger=logger, default_root_dir=str(root), **FIT)
    trainer.fit(model or HP(lr=0.05), DataLoader(tiny_dataset(32), batch_size=8),
                DataLoader(tiny_dataset(16), batch_size=8))
    return trainer


#: MLflow's SQL store uses a SQLAlchemy option that SQLAlchemy 2.1 deprecates; not ours to fix.
MLFLOW_WARNINGS = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


# -- MLflow ------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # a new SQLite store runs MLflow's schema migrations (seconds)
@MLFLOW_WARNINGS
def test_mlflow_run_read_back_with_mlflow_client(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    from ember.plugins.loggers.mlflow_logger import MLFlowLogger

    logger = MLFlowLogger(experiment_name="exp", run_name="first", tags={"team": "a"}, prefix="p")
    trainer = fit(logger, tmp_path)
    assert logger.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"  # the trainer's root folder

    client = MlflowClient(tracking_uri=logger.tracking_uri)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert run.data.params == {"lr": "0.05", "hidden": "16"}
    assert run.data.tags["team"] == "a"
    assert client.get_experiment(run.info.experiment_id).name == "exp"
    history = client.get_metric_history(logger.run_id, "p-train_loss")
    assert [m.step for m in history] == [2, 4, 6, 8]  # log_every_n_steps=2 over 8 steps
    val = client.get_metric_history(logger.run_id, "p-val_acc")
    assert [m.step for m in val] == [4, 8]
    assert val[-1].value == pytest.approx(float(trainer.callback_metrics["val_acc"]))

    class Fails(HP):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            raise ValueError("boom")

    failed = MLFlowLogger(experiment_name="exp", tracking_uri=logger.tracking_uri)
    with pytest.raises(ValueError, match="boom"):
        fit(failed, tmp_path, Fails())
    assert client.get_run(failed.run_id).info.status == "FAILED"
    # Selected by name too
    assert isinstance(ember.Trainer(logger="mlflow", default_root_dir=str(tmp_path)).loggers[0], MLFlowLogger)


# -- Weights & Biases ------------------------------------------------------------------------------------------
def read_wandb(path: str) -> list[Any]:
    """The protobuf records of an offline ``run-<id>.wandb`` file (W&B's record log: 32 KiB blocks of chunks
    with a 7-byte header: CRC32, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending, records = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def read_finished(path: str, timeout: float = 30.0) -> list[Any]:
    """The records once the run's exit record is on disk (W&B's service process writes the file)."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_wandb(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def test_wandb_offline_run_read_back_from_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    from ember.plugins.loggers.wandb_logger import WandbLogger

    logger = WandbLogger(name="offline-run", offline=True, project="ember-tests")
    trainer = fit(logger, tmp_path)
    (path,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / f"run-{logger.version}.wandb"))
    records = read_finished(path)
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.display_name, run.project, run.run_id) == ("offline-run", "ember-tests", logger.version)
    config = {i.key: i.value_json for r in records if r.WhichOneof("record_type") == "config" for i in r.config.update}
    assert config["lr"] == "0.05" and config["hidden"] == "16"
    rows = [{i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
    train = [(int(row["trainer/global_step"]), float(row["train_loss"])) for row in rows if "train_loss" in row]
    assert [s for s, _ in train] == [2, 4, 6, 8]
    val = [float(row["val_acc"]) for row in rows if "val_acc" in row]
    assert len(val) == 2 and val[-1] == pytest.approx(float(trainer.callback_metrics["val_acc"]))
    exit_code = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_code == [0]


@pytest.mark.slow
@MLFLOW_WARNINGS
def test_docs_logging_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    page = Path(__file__).resolve().parents[1] / "docs" / "logging.md"
    text = page.read_text()
    section = text[text.index("## MLflow and Weights & Biases"):text.index("## Plotting a run")]
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", section, flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (MLflow/W&B block {i + 1})", "exec"), {"__name__": "logging_doc"})
