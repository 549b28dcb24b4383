"""The warnings Lightning users rely on, given by ember in its own words: a loader with few workers (with the CPU
count read through Lightning's function of that name once Lightning's ``Trainer`` is taken), spawned workers that
are not kept, pinned persistent workers with reloading, ``self.log`` on a module no Trainer runs, and
``self.log(..., logger=True)`` on a Trainer without a logger."""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.errors import PossibleUserWarning
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False, "max_epochs": 1}


def loader(num_workers: int = 0) -> DataLoader:
    return DataLoader(tiny_dataset(n=8), batch_size=4, num_workers=num_workers)


class Evaluated(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    test_step = validation_step


def caught(fn: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in found]


@pytest.fixture
def lightning_trainer() -> Iterator[type]:
    """``pl.Trainer`` as a Lightning script takes it; the CPU counter it routes is put back afterwards."""
    from ember.core.loop import data

    before = data.count_cpus_with(None)
    import ember.lightning.pytorch as pl

    yield pl.Trainer
    data.count_cpus_with(before)


# -- few workers ------------------------------------------------------------------------------------------------
def test_the_cpu_count_patched_at_lightnings_name_steers_the_few_workers_warning(lightning_trainer: type) -> None:
    trainer = lightning_trainer(**QUIET)
    with mock.patch("ember.lightning.fabric.utilities.data._num_cpus_available", return_value=4):
        fit = caught(lambda: trainer.fit(Evaluated(), loader(), loader()))
        test = caught(lambda: trainer.test(Evaluated(), loader(), verbose=False))
    for name, messages in (("train_dataloader", fit), ("val_dataloader", fit), ("test_dataloader", test)):
        found = [m for m in messages if f"The '{name}' does not have many workers" in m]
        assert found, (name, messages)
        assert "DataLoader(num_workers=0)" in found[0] and "DataLoader(num_workers=3)" in found[0]
    with mock.patch("ember.lightning.fabric.utilities.data._num_cpus_available", return_value=2):
        quiet = caught(lambda: lightning_trainer(**QUIET).fit(Evaluated(), loader(), loader()))
    assert not [m for m in quiet if "does not have many workers" in m]  # no CPU to spare for a worker


def test_one_worker_is_named_as_a_single_worker_process(lightning_trainer: type) -> None:
    with mock.patch("ember.lightning.fabric.utilities.data._num_cpus_available", return_value=8), \
            pytest.warns(PossibleUserWarning, match=r"The 'train_dataloader' does not have many workers "
                                                    r"\(DataLoader\(num_workers=1\)\): .* a single worker process .*"
                                                    r"Pass DataLoader\(num_workers=7\)"):
        lightning_trainer(**QUIET).fit(TinyClassifier(), loader(num_workers=1))


def test_suggested_max_num_workers_counts_through_the_same_function() -> None:
    from ember.lightning.pytorch.utilities import suggested_max_num_workers

    with mock.patch("ember.lightning.fabric.utilities.data._num_cpus_available", return_value=9):
        assert suggested_max_num_workers(1) == 8
        assert suggested_max_num_workers(4) == 1


def test_ember_names_count_the_cpus_themselves() -> None:
    """Without Lightning's ``Trainer`` taken, the check reads ember's own count (patching Lightning's does not
    reach it)."""
    from ember.core.loop import data

    before = data.count_cpus_with(None)
    try:
        with mock.patch("ember.core.loop.data.available_cpus", return_value=2), \
                mock.patch("ember.lightning.fabric.utilities.data._num_cpus_available", return_value=16):
            messages = caught(lambda: ember.Trainer(**QUIET).fit(TinyClassifier(), loader()))
    finally:
        data.count_cpus_with(before)
    assert not [m for m in messages if "does not have many workers" in m]


def test_spawned_workers_that_are_not_kept_are_named() -> None:
    spawn = multiprocessing.get_context("spawn")

    def fit(**loader_args: Any) -> list[str]:
        data = DataLoader(tiny_dataset(n=8), batch_size=4, num_workers=1, multiprocessing_context=spawn,
                          **loader_args)
        return caught(lambda: ember.Trainer(**QUIET, limit_train_batches=1).fit(TinyClassifier(), data))

    found = [m for m in fit() if "Consider setting `persistent_workers=True`" in m]
    assert len(found) == 1 and "The 'train_dataloader' starts DataLoader(num_workers=1) workers with the 'spawn'" \
        in found[0]
    assert not [m for m in fit(persistent_workers=True) if "persistent_workers=True`" in m]


def test_pinned_persistent_workers_with_reloading_are_named() -> None:
    def fit(reload: int) -> list[str]:
        data = DataLoader(tiny_dataset(n=8), batch_size=4, num_workers=1, persistent_workers=True, pin_memory=True)
        trainer = ember.Trainer(**QUIET, limit_train_batches=1, reload_dataloaders_every_n_epochs=reload)
        return caught(lambda: trainer.fit(TinyClassifier(), data))

    found = [m for m in fit(1) if "DataLoader(pin_memory=True, persistent_workers=True)" in m]
    assert len(found) == 1 and "reload_dataloaders_every_n_epochs=1" in found[0] and "pin_memory=False" in found[0]
    assert not [m for m in fit(0) if "pin_memory=True, persistent_workers=True" in m]


def test_the_check_leaves_the_start_method_unfixed() -> None:
    before = multiprocessing.get_start_method(allow_none=True)
    ember.Trainer(**QUIET, limit_train_batches=1).fit(TinyClassifier(), loader())
    assert multiprocessing.get_start_method(allow_none=True) == before


def test_an_evaluation_loader_without_batches_is_named() -> None:
    empty = DataLoader(tiny_dataset(n=3), batch_size=4, drop_last=True)  # smaller than one batch
    trainer = ember.Trainer(**QUIET)
    fit = caught(lambda: trainer.fit(Evaluated(), loader(), empty))
    assert [m for m in fit if m.startswith("The 'val_dataloader' has no batches (len() is 0)")]
    test = caught(lambda: trainer.test(Evaluated(), empty, verbose=False))
    assert [m for m in test if "The 'test_dataloader' has no batches" in m and "no test step runs on it" in m]
    skipped = caught(lambda: ember.Trainer(**QUIET, limit_val_batches=0).fit(Evaluated(), loader(), empty))
    assert not [m for m in skipped if "has no batches" in m]  # validation switched off on purpose


# -- self.log ---------------------------------------------------------------------------------------------------
def test_log_on_a_module_no_trainer_runs_warns_and_drops_the_value() -> None:
    model = TinyClassifier()
    with pytest.warns(UserWarning, match=r"TinyClassifier\.log\('loss', \.\.\.\) did nothing: the `self\.trainer` "
                                         r"reference is not registered"):
        model.log("loss", 1.0)
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        model.log_dict({"a": 1.0, "b": 2.0})
    assert [str(w.message) for w in found] == [
        "TinyClassifier.log_dict(['a', 'b'], ...) did nothing: the `self.trainer` reference is not registered on this "
        "module, because no Trainer run (fit, validate, test or predict) has it. The value is dropped; run the step "
        "through a Trainer to record it."]  # one warning for the dictionary
    with pytest.raises(RuntimeError, match="is not attached to a `Trainer`"):  # the property itself still says so
        _ = model.trainer


class LogsToLogger(TinyClassifier):
    def __init__(self, **log_args: Any) -> None:
        super().__init__()
        self.log_args = log_args

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        self.log("epoch", -batch_idx, **self.log_args)
        return loss


def test_log_asking_for_a_logger_on_a_trainer_without_one_warns_once_per_name(tmp_path: Any) -> None:
    from ember.lightning.pytorch.loggers import CSVLogger

    trainer = ember.Trainer(**QUIET, limit_train_batches=2)
    messages = caught(lambda: trainer.fit(LogsToLogger(logger=True), DataLoader(tiny_dataset(n=8), batch_size=2)))
    found = [m for m in messages if "logger=True)` but have no logger" in m]
    assert len(found) == 1 and "self.log('epoch', ..., logger=True)" in found[0] and "Trainer(logger=" in found[0]
    assert trainer.logged_metrics["epoch"] == -1
    for log_args, kwargs in (({}, {}), ({"logger": False}, {}),
                             ({"logger": True}, {"logger": CSVLogger(tmp_path)})):
        trainer = ember.Trainer(**{**QUIET, **kwargs}, limit_train_batches=2)
        messages = caught(lambda: trainer.fit(LogsToLogger(**log_args), loader()))  # noqa: B023
        assert not [m for m in messages if "but have no logger" in m], log_args


@pytest.mark.parametrize("hook", ["setup", "configure_optimizers", "on_fit_start"])
def test_log_where_a_running_fit_collects_nothing_says_so(hook: str) -> None:
    from ember.core.errors import ConfigurationError

    class LogsEarly(TinyClassifier):
        pass

    def logs(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.log("early", 1.0)
        return getattr(TinyClassifier, hook)(self, *args, **kwargs) if hasattr(TinyClassifier, hook) else None

    setattr(LogsEarly, hook, logs)
    with pytest.raises(ConfigurationError, match=r"You can't `self\.log\('early', \.\.\.\)` here: it was called "
                                                 r"while trainer\.fit\(\) runs but outside its epoch loops") as error:
        ember.Trainer(**QUIET).fit(LogsEarly(), loader())
    assert isinstance(error.value, RuntimeError)  # what it raised before
