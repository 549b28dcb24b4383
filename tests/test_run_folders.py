"""One folder per run: ``<root>/<name>/version_N/`` holds the run's checkpoints, metrics and hparams.yaml;
``ckpt_path="last"``/``"best"`` find the latest run of the same name; evaluation never uses an untrained model
silently; a checkpoint of another model is an error naming the mismatches; the loggers' Lightning surface."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import ember
from ember.core.errors import CheckpointError, ConfigurationError, UntrainedWeightsWarning
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.plugins.loggers.csv_logger import CSVLogger
from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False,
         "enable_model_summary": False}


class Saved(TinyClassifier):
    """TinyClassifier that stores its arguments (for load_from_checkpoint) and logs ``score``: 1 at epoch 1 only."""

    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters()

    def on_validation_epoch_end(self) -> None:
        self.log("score", float(self.current_epoch == 1))


def fit(root: Path, epochs: int = 1, model: torch.nn.Module | None = None, **kwargs) -> ember.Trainer:
    train, val = tiny_loaders(n=32, batch_size=8)
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(root), **{**QUIET, **kwargs})
    trainer.fit(model if model is not None else Saved(), train, val, ckpt_path=ckpt_path)
    return trainer


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# -- the layout -------------------------------------------------------------------------------------------------


def test_each_run_has_its_own_folder_with_checkpoints_metrics_and_hparams(tmp_path):
    first = fit(tmp_path)
    second = fit(tmp_path)
    for trainer, version in ((first, "version_0"), (second, "version_1")):
        run = tmp_path / "ember_logs" / version
        assert trainer.log_dir == str(run)
        assert trainer.checkpoint_callback.dirpath == str(run / "checkpoints")
        assert names(run / "checkpoints") == ["epoch=0-step=4.ckpt", "last.ckpt"]
        assert yaml.safe_load((run / "hparams.yaml").read_text()) == {"hidden": 16, "lr": 0.1}
        assert any(n.startswith("events.out.tfevents") or n == "metrics.csv" for n in os.listdir(run))
    assert not (tmp_path / "checkpoints").exists()


def test_without_a_logger_checkpoints_go_to_the_root(tmp_path):
    trainer = fit(tmp_path, logger=False)
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "checkpoints")
    assert names(tmp_path) == ["checkpoints"]


def test_a_logger_without_versions_gives_no_run_folder(tmp_path):
    class Printer:
        role = "logger"

        @ember.hookimpl
        def log_metrics(self, metrics: dict, step: int) -> None:
            pass

    trainer = fit(tmp_path, logger=Printer())
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "checkpoints")
    assert trainer.log_dir == str(tmp_path)


def test_the_logger_name_and_version_name_the_folder(tmp_path):
    trainer = fit(tmp_path, logger=CSVLogger(name="exp", version="lr-0.1"))
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "exp" / "lr-0.1" / "checkpoints")
    assert names(tmp_path / "exp" / "lr-0.1") == ["checkpoints", "hparams.yaml", "metrics.csv"]


# -- ckpt_path="last" / "best" ---------------------------------------------------------------------------------


def test_last_resumes_the_latest_run_of_the_same_name_into_a_new_version(tmp_path, capsys):
    ember.seed_everything(0)
    fit(tmp_path, logger=CSVLogger(name="a"))
    fit(tmp_path, model=Saved(hidden=5), logger=CSVLogger(name="b"))  # another experiment, written later
    resumed = fit(tmp_path, epochs=2, logger=CSVLogger(name="a"), ckpt_path="last")
    source = tmp_path / "a" / "version_0" / "checkpoints" / "last.ckpt"
    assert resumed.ckpt_path == str(source)
    assert f"resuming from {source}" in capsys.readouterr().err
    assert resumed.log_dir == str(tmp_path / "a" / "version_1")  # a new version folder, as in Lightning
    assert names(tmp_path / "a" / "version_1" / "checkpoints") == ["epoch=1-step=8.ckpt", "last.ckpt"]
    assert names(tmp_path / "a" / "version_0" / "checkpoints") == ["epoch=0-step=4.ckpt", "last.ckpt"]  # untouched
    # exact: the same weights as two epochs without a stop
    ember.seed_everything(0)
    straight = fit(tmp_path / "straight", epochs=2, logger=CSVLogger(name="a"))
    for mine, theirs in zip(resumed.module.parameters(), straight.module.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_last_takes_the_newest_version_that_has_a_checkpoint(tmp_path):
    fit(tmp_path, logger=CSVLogger(name="a"))
    fit(tmp_path, epochs=2, logger=CSVLogger(name="a"))
    (tmp_path / "a" / "version_2").mkdir()  # a run that stopped before its first checkpoint
    resumed = fit(tmp_path, epochs=2, logger=CSVLogger(name="a"), ckpt_path="last")
    assert resumed.ckpt_path == str(tmp_path / "a" / "version_1" / "checkpoints" / "last.ckpt")
    assert resumed.log_dir == str(tmp_path / "a" / "version_3")
    assert resumed.global_step == 8  # nothing left to train


def test_last_with_no_earlier_run_starts_fresh(tmp_path):
    with pytest.warns(UserWarning, match="no last checkpoint at .* No checkpoint will be loaded: the fit starts"):
        trainer = fit(tmp_path, ckpt_path="last")
    assert trainer.ckpt_path is None and trainer.global_step == 4


def test_best_of_a_new_trainer_is_the_best_of_the_latest_run(tmp_path, capsys):
    fit(tmp_path, epochs=3, callbacks=[ModelCheckpoint(monitor="score", mode="max")])
    run = tmp_path / "ember_logs" / "version_0" / "checkpoints"
    assert names(run) == ["epoch=1-step=8.ckpt", "last.ckpt"]
    trainer = ember.Trainer(callbacks=[ModelCheckpoint(monitor="score", mode="max")], default_root_dir=str(tmp_path),
                            **QUIET)
    trainer.validate(Saved(), tiny_loaders(n=32, batch_size=8)[1], ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == str(run / "epoch=1-step=8.ckpt")
    assert f"loading {run / 'epoch=1-step=8.ckpt'}" in capsys.readouterr().err


def test_best_with_nothing_to_find_is_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match=r"ckpt_path='best': no best checkpoint yet.*ember_logs"):
        ember.Trainer(default_root_dir=str(tmp_path), **QUIET).test(Saved(), tiny_loaders()[1], ckpt_path="best")


# -- evaluation needs weights ----------------------------------------------------------------------------------


def test_evaluation_without_ckpt_path_uses_the_latest_fit_and_says_which(tmp_path, capsys):
    fit(tmp_path, epochs=3, callbacks=[ModelCheckpoint(monitor="score", mode="max")])
    best = tmp_path / "ember_logs" / "version_0" / "checkpoints" / "epoch=1-step=8.ckpt"
    capsys.readouterr()
    model = Saved()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedWeightsWarning)
        trainer = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
        trainer.test(model, tiny_loaders()[1], verbose=False)
    assert trainer.ckpt_path == str(best)
    err = capsys.readouterr().err
    assert f"trainer.test() evaluates {best}" in err and "ckpt_path=" in err
    saved = safe_load(str(best))["state_dict"]
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())


def test_evaluation_falls_back_to_the_last_checkpoint(tmp_path):
    fit(tmp_path, epochs=2, callbacks=[ModelCheckpoint(save_top_k=0)])  # last.ckpt only: no best recorded
    trainer = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
    trainer.predict(Saved(), tiny_loaders()[1])
    assert trainer.ckpt_path == str(tmp_path / "ember_logs" / "version_0" / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_evaluation_of_weights_from_nowhere_warns(tmp_path, fn):
    trainer = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
    with pytest.warns(UntrainedWeightsWarning, match=rf"trainer\.{fn}\(\) evaluates the model's current weights.*"
                                                     r"run name 'ember_logs'.*ckpt_path='path/to/file\.ckpt'") as caught:
        getattr(trainer, fn)(Saved(), tiny_loaders()[1])
    assert trainer.ckpt_path is None
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_weights_from_a_fit_or_a_checkpoint_are_evaluated_as_they_are(tmp_path):
    trainer = fit(tmp_path)
    model = trainer.module
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedWeightsWarning)
        trainer.validate(model, tiny_loaders()[1], verbose=False)  # fit by this Trainer: today's weights
        assert trainer.ckpt_path is None
        other = ember.Trainer(default_root_dir=str(tmp_path / "elsewhere"), **QUIET)
        other.test(model, tiny_loaders()[1], verbose=False)  # fit by another Trainer
        assert other.ckpt_path is None
        loaded = Saved.load_from_checkpoint(trainer.checkpoint_callback.last_model_path)
        third = ember.Trainer(default_root_dir=str(tmp_path / "third"), **QUIET)
        third.validate(loaded, tiny_loaders()[1], verbose=False)
        assert third.ckpt_path is None
        fresh = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
        fresh.validate(Saved(), tiny_loaders()[1], ckpt_path="current", verbose=False)  # on purpose
        assert fresh.ckpt_path is None
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# -- a checkpoint of another model ------------------------------------------------------------------------------


def test_resuming_another_model_names_the_mismatched_parameters_and_the_run(tmp_path):
    fit(tmp_path)
    run = tmp_path / "ember_logs" / "version_0"
    with pytest.raises(CheckpointError) as caught:
        fit(tmp_path, model=Saved(hidden=5), ckpt_path="last")
    message = str(caught.value)
    assert f"{run / 'checkpoints' / 'last.ckpt'} holds the weights of another model than this Saved" in message
    assert "3 with another shape ('net.0.weight': (16, 8) in the checkpoint, (5, 8) in the model" in message
    assert f"comes from the run {run}, written at global step 4" in message
    assert "ckpt_path='last'" in message


def test_load_from_checkpoint_lists_missing_and_unexpected_names(tmp_path):
    class Deeper(Saved):
        def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
            super().__init__(hidden, lr)
            self.heads = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(4))

    class Renamed(Saved):
        def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
            super().__init__(hidden, lr)
            self.body = self.net
            del self.net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    path = fit(tmp_path).checkpoint_callback.last_model_path
    with pytest.raises(CheckpointError, match=r"8 of the model's missing from the checkpoint \('heads\.0\.weight', "
                                              r"'heads\.0\.bias', .*\(3 more\)\)") as caught:
        Deeper.load_from_checkpoint(path)
    assert "another shape" not in str(caught.value) and "lacks" not in str(caught.value)
    with pytest.raises(CheckpointError, match=r"4 in the checkpoint that the model lacks \('net\.0\.weight'"):
        Renamed.load_from_checkpoint(path)
    assert isinstance(Renamed.load_from_checkpoint(path, strict=False), Renamed)  # names forgiven, not shapes
    with pytest.raises(CheckpointError, match=r"3 with another shape"):
        Saved.load_from_checkpoint(path, strict=False, hidden=17)


# -- loggers as Lightning users know them -----------------------------------------------------------------------


def test_tensorboard_is_the_default_logger_when_installed(tmp_path, monkeypatch):
    from ember.core.hooks import options
    from ember.plugins import loggers

    trainer = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
    assert [type(lg) for lg in trainer.loggers] == [TensorBoardLogger]
    monkeypatch.setattr(options, "_cache", {})
    monkeypatch.setattr(loggers.importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else importlib_find_spec(name, *a))
    trainer = ember.Trainer(default_root_dir=str(tmp_path), **QUIET)
    assert [type(lg) for lg in trainer.loggers] == [CSVLogger]
    monkeypatch.undo()
    options._cache.clear()


def importlib_find_spec(name, *args):
    import importlib.machinery

    return importlib.machinery.PathFinder.find_spec(name, *args)


@pytest.mark.parametrize("kind", [CSVLogger, TensorBoardLogger])
def test_the_logger_surface(tmp_path, kind):
    logger = kind(name="exp")
    trainer = fit(tmp_path, logger=logger)
    assert trainer.logger is logger and trainer.loggers == [logger]
    assert (logger.name, logger.version, logger.save_dir) == ("exp", 0, str(tmp_path))
    assert logger.log_dir == trainer.log_dir == str(tmp_path / "exp" / "version_0")
    logger.log_hyperparams({"extra": 3})
    logger.log_metrics({"by_hand": 2.5}, step=7)
    logger.save()
    logger.finalize("success")
    assert yaml.safe_load((tmp_path / "exp" / "version_0" / "hparams.yaml").read_text())["extra"] == 3
    if kind is TensorBoardLogger:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from torch.utils.tensorboard import SummaryWriter

        assert isinstance(logger.experiment, SummaryWriter)
        logger.finalize("success")
        acc = EventAccumulator(logger.log_dir)
        acc.Reload()
        assert [(e.step, e.value) for e in acc.Scalars("by_hand")] == [(7, 2.5)]
    else:
        experiment = logger.experiment
        assert experiment.metrics_file_path == os.path.join(logger.log_dir, "metrics.csv")
        experiment.log_metrics({"by_hand": 4.0}, step=9)
        experiment.save()
        rows = (tmp_path / "exp" / "version_0" / "metrics.csv").read_text().splitlines()
        assert rows[-2].endswith(",2.5") and rows[-1].endswith(",4.0")


def test_plot_reads_a_tensorboard_run(tmp_path):
    pytest.importorskip("matplotlib")
    from ember.plot import plot_run, read_metrics

    trainer = fit(tmp_path, epochs=2, log_every_n_steps=1)
    png = plot_run(tmp_path / "ember_logs")
    assert png == os.path.join(trainer.log_dir, "curves.png") and Path(png).read_bytes()[:4] == b"\x89PNG"
    events = [n for n in os.listdir(trainer.log_dir) if n.startswith("events.out.tfevents")][0]
    series = read_metrics(os.path.join(trainer.log_dir, events))
    assert series["train_loss"][0] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert series["val_loss"][0] == [4.0, 8.0]


# -- against Lightning (tests/lightning/record_run_folders.py recorded it) -----------------------------------------

LIGHTNING = __import__("json").loads((Path(__file__).parent / "lightning" / "run_folders.json").read_text())


class Plain(ember.Module):
    """The recorded module: one linear layer, no hyperparameters."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_names(path: str | None) -> str | None:
    """A recorded relative path with ember's default logger name."""
    return None if path is None else path.replace("lightning_logs", "ember_logs")


def test_layout_and_ckpt_path_choices_match_lightning(tmp_path):
    def rel(path):
        return None if path is None else os.path.relpath(path, tmp_path)

    first = fit(tmp_path, model=Plain())
    recorded = LIGHTNING["default"]
    assert type(first.logger).__name__ == recorded["logger"]
    assert rel(first.log_dir) == lightning_names(recorded["log_dir"])
    assert rel(first.checkpoint_callback.dirpath) == lightning_names(recorded["checkpoint_dirpath"])
    folder = {n if not n.startswith("events.out") else "events.out.tfevents*" for n in os.listdir(first.log_dir)}
    assert set(recorded["run_folder"]) <= folder
    # the fitted model, given again: its current weights
    first.validate(first.module, tiny_loaders(n=16, batch_size=8)[1], verbose=False)
    assert first.ckpt_path == LIGHTNING["evaluate_after_fit"]["with_model_ckpt_path"] is None
    # a new Trainer resuming from a file starts the next version folder, and writes its checkpoints there
    resumed = fit(tmp_path, epochs=2, model=Plain(), ckpt_path=first.checkpoint_callback.last_model_path)
    assert rel(resumed.log_dir) == lightning_names(LIGHTNING["new_trainer"]["last_log_dir"])
    assert rel(resumed.checkpoint_callback.dirpath) == \
        lightning_names(LIGHTNING["new_trainer"]["last_log_dir"]) + os.sep + "checkpoints"
    no_logger = fit(tmp_path / "bare", model=Plain(), logger=False)
    assert os.path.relpath(no_logger.checkpoint_callback.dirpath, tmp_path / "bare") == \
        LIGHTNING["no_logger"]["checkpoint_dirpath"]
    assert os.path.relpath(no_logger.log_dir, tmp_path / "bare") == LIGHTNING["no_logger"]["log_dir"]


def test_the_documented_difference_from_lightning_and_evaluation_after_fit(tmp_path):
    """On purpose (docs/checkpoints.md): a new Trainer's ckpt_path="last" finds the latest run of the name
    (Lightning looks only in the new version folder and finds nothing). As in Lightning, ``validate()`` without a
    model after a fit evaluates the best checkpoint."""
    assert LIGHTNING["new_trainer"]["last_ckpt_path"] is None and LIGHTNING["new_trainer"]["last_warns_none_available"]
    first = fit(tmp_path, model=Plain())
    again = fit(tmp_path, epochs=2, model=Plain(), ckpt_path="last")
    assert again.ckpt_path == first.checkpoint_callback.last_model_path
    recorded = LIGHTNING["evaluate_after_fit"]
    assert recorded["without_model_warns_best"] and recorded["without_model_ckpt_path"].endswith(".ckpt")
    with pytest.warns(UserWarning, match="The best model of the previous `fit` call will be used"):  # as Lightning
        first.validate(dataloaders=tiny_loaders(n=16, batch_size=8)[1], verbose=False)
    assert first.ckpt_path == first.checkpoint_callback.best_model_path and first.ckpt_path.endswith(".ckpt")


@pytest.mark.parametrize("kind", [CSVLogger, TensorBoardLogger])
def test_logger_attributes_match_lightning(tmp_path, kind):
    if kind is TensorBoardLogger:
        fit(tmp_path, model=Plain(), logger=CSVLogger(save_dir=tmp_path, name="exp"))  # as recorded: CSV first
    logger = kind(save_dir=tmp_path, name="exp")
    fit(tmp_path, model=Plain(), logger=logger)
    recorded = LIGHTNING["loggers"][kind.__name__]
    assert (logger.name, logger.version) == (recorded["name"], recorded["version"])
    assert os.path.relpath(logger.save_dir, tmp_path) == recorded["save_dir"]
    assert os.path.relpath(logger.log_dir, tmp_path) == recorded["log_dir"]
    assert type(logger.experiment).__name__ == recorded["experiment"]
    assert [a for a in recorded["experiment_has"] if not hasattr(logger.experiment, a)] == []
    assert [m for m in recorded["methods"] if not callable(getattr(logger, m, None))] == []
    logger.finalize("success")


@pytest.mark.slow  # W&B starts a service process
@pytest.mark.extended  # each logger's run folder is read back in every run by tests/test_mlflow_wandb.py
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")  # inside MLflow's store
def test_mlflow_and_wandb_loggers_have_the_same_surface(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from ember.plugins.loggers.mlflow_logger import MLFlowLogger
    from ember.plugins.loggers.wandb_logger import WandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    mlflow_logger = MLFlowLogger(experiment_name="exp", save_dir=tmp_path)
    wandb_logger = WandbLogger(project="proj", save_dir=tmp_path, offline=True)
    trainer = fit(tmp_path, logger=[mlflow_logger, wandb_logger])
    # Lightning's meanings: the experiment id and run id; the run folder under save_dir/name/version
    assert mlflow_logger.name == mlflow_logger.experiment.get_experiment_by_name("exp").experiment_id
    assert mlflow_logger.version == mlflow_logger.run_id and mlflow_logger.log_dir is None
    assert trainer.log_dir == str(tmp_path)  # the first logger's save_dir
    assert trainer.checkpoint_callback.dirpath == os.path.join(tmp_path, mlflow_logger.name, mlflow_logger.run_id,
                                                               "checkpoints")
    assert (wandb_logger.name, wandb_logger.log_dir) == ("proj", str(tmp_path))
    for logger in (mlflow_logger, wandb_logger):
        logger.save()
        logger.finalize("success")
    run = mlflow_logger.experiment.get_run(mlflow_logger.run_id)
    assert run.info.status == "FINISHED"
