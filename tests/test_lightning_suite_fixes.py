"""Behaviours that Lightning's own test suite (scripts/lightning_suite.py) showed ember lacked, checked here on
ember alone: the harness needs a checkout of Lightning's tests, and these must hold without one."""

from __future__ import annotations

import importlib
import sys
import warnings
from argparse import Namespace
from pathlib import Path

import pytest
import torch

import ember
import ember.lightning.pytorch as pl
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders


class Base(pl.LightningModule):
    def __init__(self, batch_size: int = 64, **kwargs):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 2)


class Child(Base):
    def __init__(self, subclass_arg: int = 1200, **kwargs):
        super().__init__(**kwargs)


def test_save_hyperparameters_collects_every_init_of_the_object():
    model = Child(batch_size=179)
    assert dict(model.hparams) == {"batch_size": 179, "subclass_arg": 1200}
    assert pl.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY == "hyper_parameters"


def test_save_hyperparameters_of_a_namespace_keeps_its_contents():
    class FromConfig(pl.LightningModule):
        def __init__(self, config):
            super().__init__()
            self.save_hyperparameters(config)

    assert dict(FromConfig(Namespace(lr=0.1, depth=3)).hparams) == {"lr": 0.1, "depth": 3}


def test_module_trainer_can_be_set_and_state_values_answer_value():
    model, inner = TinyClassifier(), TinyClassifier()
    model.inner = inner
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    model.trainer = trainer
    assert model.trainer is trainer and inner.trainer is trainer
    model.trainer = None
    with pytest.raises(RuntimeError, match="not attached"):
        model.trainer  # noqa: B018
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert trainer.state.fn == "fit" and trainer.state.fn.value == "fit" and trainer.state.status.value == "finished"


def test_csv_logger_takes_lightning_optional_arguments(tmp_path):
    from ember.lightning.pytorch.loggers.csv_logs import CSVLogger, ExperimentWriter

    logger = CSVLogger(tmp_path, name="")
    logger.log_hyperparams()
    logger.log_metrics({"a": 1.0})
    logger.log_metrics({"a": 2.0})
    logger.save()
    lines = (Path(logger.log_dir) / ExperimentWriter.NAME_METRICS_FILE).read_text().splitlines()
    assert lines[0] == "step,a" and [line.split(",")[0] for line in lines[1:]] == ["0", "1"]  # step: the row's index
    assert (Path(logger.log_dir) / ExperimentWriter.NAME_HPARAMS_FILE).exists()


def test_hparams_files_round_trip(tmp_path):
    from enum import Enum

    from ember.lightning.pytorch.core.saving import (
        load_hparams_from_tags_csv,
        load_hparams_from_yaml,
        save_hparams_to_tags_csv,
        save_hparams_to_yaml,
    )

    class Choice(str, Enum):
        one = "1"

    hparams = {"lr": 0.008, "name": "adam", "nested": {"a": 1}, "choice": Choice.one}
    save_hparams_to_yaml(tmp_path / "h.yaml", Namespace(**hparams))
    assert load_hparams_from_yaml(tmp_path / "h.yaml", use_omegaconf=False) == {**hparams, "choice": "one"}
    with pytest.warns(UserWarning, match="Skipping 'dtype'"):
        save_hparams_to_yaml(tmp_path / "h.yaml", {"dtype": torch.float32})
    save_hparams_to_tags_csv(tmp_path / "tags.csv", {"lr": 0.008, "name": "adam"})
    assert load_hparams_from_tags_csv(tmp_path / "tags.csv") == {"lr": 0.008, "name": "adam"}
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert load_hparams_from_yaml(tmp_path / "missing.yaml") == {}


def test_fabric_utilities_and_tqdm_names():
    from ember.lightning.fabric import Fabric
    from ember.lightning.fabric.utilities.data import has_iterable_dataset
    from ember.lightning.fabric.utilities.exceptions import MisconfigurationException
    from ember.lightning.fabric.utilities.warnings import PossibleUserWarning
    from ember.lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
    from ember.lightning.pytorch.utilities.data import has_len_all_ranks

    assert PossibleUserWarning is pl.utilities.PossibleUserWarning
    assert MisconfigurationException is ember.ConfigurationError
    assert not has_iterable_dataset(torch.utils.data.DataLoader([1, 2]))
    assert has_len_all_ranks(torch.utils.data.DataLoader([1, 2]))
    with pytest.raises(NotImplementedError, match="Fabric is not part of ember"):
        Fabric()
    assert [Tqdm.format_num(x) for x in (1, 1.0, 0.1, 1e-5, "abc")] == ["1", "1.000", "0.100", "1e-5", "abc"]


def test_the_suite_harness_stands_in_for_lightning_privates_only():
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    try:
        suite = importlib.import_module("lightning_suite")
    finally:
        sys.path.pop(0)
    loop = suite._stand_in("lightning.pytorch.loops", "_FitLoop")
    with pytest.raises(suite.NotInEmber, match="private machinery"):
        loop()
    assert suite._stand_in("lightning.pytorch.utilities.imports", "_TORCH_GREATER_EQUAL_2_1") is True
    assert "Fabric" in suite._why("lightning.fabric", "Fabric")
    kind, _ = suite._cause({"outcome": "failed", "message": "AttributeError: 'Trainer' object has no attribute "
                                                            "'fit_loop'"}, "")
    assert kind == "internal"
    kind, _ = suite._cause({"outcome": "failed", "message": "Failed: DID NOT WARN."}, "")
    assert kind == "differs"


def test_a_subclass_of_a_built_in_callback_takes_lightning_style_hooks(tmp_path):
    from ember.lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    seen = []

    class Stopping(EarlyStopping):
        def on_train_epoch_end(self, trainer, pl_module):  # overrides a hook of the base
            seen.append(("stop", type(pl_module).__name__))
            super().on_train_epoch_end(trainer)

    class Checkpoint(ModelCheckpoint):
        def on_train_start(self, trainer, pl_module):  # a hook the base does not have
            seen.append(("start", type(pl_module).__name__))

    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 1, "enable_checkpointing": True},
                            callbacks=[Stopping(monitor="x", strict=False), Checkpoint(dirpath=tmp_path)])
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert seen == [("start", "TinyClassifier"), ("stop", "TinyClassifier")]


def test_lr_monitor_keeps_lightning_history_and_datamodule_describes_its_loaders(tmp_path):
    import os

    from ember.lightning.pytorch.callbacks import LearningRateMonitor
    from ember.lightning.pytorch.demos.boring_classes import BoringDataModule

    monitor = LearningRateMonitor(log_momentum=True)
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 2, "logger": "csv", "default_root_dir": tmp_path},
                            callbacks=[monitor])  # the monitor needs a logger, as Lightning's does
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert list(monitor.lrs) == ["lr-SGD"] and len(monitor.lrs["lr-SGD"]) == 2
    assert list(monitor.last_momentum_values) == ["lr-SGD-momentum"]
    assert monitor.last_weight_decay_values == {"lr-SGD-weight_decay": None}
    dm = BoringDataModule()
    dm.setup("test")
    assert str(dm).split(os.linesep) == ["{Train dataloader: None}", "{Validation dataloader: None}",
                                         "{Test dataloader: size=64}", "{Predict dataloader: None}"]


def test_state_values_set_from_lightning_enums_and_the_stage_passed_to_setup():
    from ember.lightning.pytorch.trainer.states import RunningStage, TrainerFn

    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    trainer.state.stage = RunningStage.TRAINING
    assert trainer.state.stage == "train" and trainer.state.stage.value == "train"
    assert trainer.state.stage == RunningStage.TRAINING
    stages = []

    class Recording(TinyClassifier):
        def setup(self, stage):
            stages.append(stage.value)

    trainer.fit(Recording(), *tiny_loaders(n=16))
    assert stages == ["fit"] and trainer.state.fn == TrainerFn.FITTING


def test_a_limit_of_exactly_one_is_explained_and_bad_limits_say_so(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="ember"):
        ember.Trainer(**{**FAST_TRAINER_ARGS, "limit_val_batches": 1.0})
    assert "`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches per epoch will be used" \
        in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ember"):
        ember.Trainer(**FAST_TRAINER_ARGS)
    assert "was configured so" not in caplog.text
    with pytest.raises(ember.ConfigurationError, match="passed invalid value"):
        ember.Trainer(limit_train_batches=1.2)
    with pytest.raises(ember.ConfigurationError, match="should be an int >= 0"):
        ember.Trainer(reload_dataloaders_every_n_epochs=-1)


def test_refresh_rate_zero_draws_nothing_and_xla_is_a_placeholder(capsys):
    import io

    from ember.lightning._names import UnsupportedError
    from ember.lightning.pytorch.accelerators import XLAAccelerator
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar  # ember's bar (force_terminal, file)

    out = io.StringIO()
    bar = TQDMProgressBar(refresh_rate=0, force_terminal=True, file=out)
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "enable_progress_bar": True}, callbacks=[bar])
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert out.getvalue() == ""
    assert not XLAAccelerator.is_available()
    with pytest.raises(UnsupportedError, match="XLA"):
        XLAAccelerator()
