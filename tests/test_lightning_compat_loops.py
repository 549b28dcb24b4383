"""Lightning's loop objects on the Trainer (``trainer.fit_loop``, ``validate_loop``, ``test_loop``, ``predict_loop``):
views of ember's loop state whose values were recorded from Lightning 2.6 running the same fits
(``ember/core/loop/loop_views.py``)."""

from __future__ import annotations

import time

import pytest

import ember.lightning.pytorch as pl
from ember.core.errors import ConfigurationError
from ember.lightning.pytorch.demos.boring_classes import BoringModel

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
             accelerator="cpu")


def _four(t):
    return t.ready, t.started, t.processed, t.completed


def _point(trainer, where):
    fl = trainer.fit_loop
    el = fl.epoch_loop
    return (where, fl.batch_idx, fl.total_batch_idx, _four(fl.epoch_progress.current),
            (el.batch_progress.current.ready, el.batch_progress.current.completed),
            (el.batch_progress.total.ready, el.batch_progress.total.completed),
            _four(el.val_loop.batch_progress.current), _four(el.val_loop.batch_progress.total),
            el.automatic_optimization.optim_progress.optimizer.step.total.completed, fl.done, fl._should_accumulate(),
            _four(trainer.validate_loop.batch_progress.current), _four(trainer.test_loop.batch_progress.current),
            _four(trainer.predict_loop.batch_progress.current))


# What Lightning 2.6.6 shows at each point of the scenario below (epochs, batches and steps; the fit's validation
# with its sanity check; validate, test and predict after the fit). Inside one training batch only ``ready`` and
# ``completed`` are compared: ember does not mark the points between them (see loop_views' docstring).
LIGHTNING = [
    ('before', -1, -1, (0, 0, 0, 0), (0, 0), (0, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end0', -1, -1, (0, 0, 0, 0), (0, 0), (0, 0), (1, 1, 1, 0), (1, 1, 1, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_end', -1, -1, (0, 0, 0, 0), (0, 0), (0, 0), (1, 1, 1, 1), (1, 1, 1, 1), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('train_start', -1, -1, (0, 0, 0, 0), (0, 0), (0, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('epoch_start', -1, -1, (1, 0, 0, 0), (0, 0), (0, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start0', 0, 0, (1, 1, 0, 0), (1, 0), (1, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step0', 0, 0, (1, 1, 0, 0), (1, 0), (1, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end0', 0, 0, (1, 1, 0, 0), (1, 0), (1, 0), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start1', 1, 1, (1, 1, 0, 0), (2, 1), (2, 1), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step1', 1, 1, (1, 1, 0, 0), (2, 1), (2, 1), (0, 0, 0, 0), (0, 0, 0, 0), 0, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end1', 1, 1, (1, 1, 0, 0), (2, 1), (2, 1), (0, 0, 0, 0), (0, 0, 0, 0), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end0', 1, 1, (1, 1, 0, 0), (2, 2), (2, 2), (1, 1, 1, 0), (1, 1, 1, 0), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end1', 1, 1, (1, 1, 0, 0), (2, 2), (2, 2), (2, 2, 2, 1), (2, 2, 2, 1), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_end', 1, 1, (1, 1, 0, 0), (2, 2), (2, 2), (2, 2, 2, 2), (2, 2, 2, 2), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start2', 2, 2, (1, 1, 0, 0), (3, 2), (3, 2), (2, 2, 2, 2), (2, 2, 2, 2), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step2', 2, 2, (1, 1, 0, 0), (3, 2), (3, 2), (2, 2, 2, 2), (2, 2, 2, 2), 1, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end2', 2, 2, (1, 1, 0, 0), (3, 2), (3, 2), (2, 2, 2, 2), (2, 2, 2, 2), 2, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('epoch_end', 2, 2, (1, 1, 1, 0), (3, 3), (3, 3), (2, 2, 2, 2), (2, 2, 2, 2), 2, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('epoch_start', 2, 2, (2, 1, 1, 1), (3, 3), (3, 3), (2, 2, 2, 2), (2, 2, 2, 2), 2, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start0', 0, 3, (2, 2, 1, 1), (1, 0), (4, 3), (2, 2, 2, 2), (0, 0, 0, 0), 2, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step0', 0, 3, (2, 2, 1, 1), (1, 0), (4, 3), (2, 2, 2, 2), (0, 0, 0, 0), 2, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end0', 0, 3, (2, 2, 1, 1), (1, 0), (4, 3), (2, 2, 2, 2), (0, 0, 0, 0), 2, False, True, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start1', 1, 4, (2, 2, 1, 1), (2, 1), (5, 4), (2, 2, 2, 2), (0, 0, 0, 0), 2, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step1', 1, 4, (2, 2, 1, 1), (2, 1), (5, 4), (2, 2, 2, 2), (0, 0, 0, 0), 2, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end1', 1, 4, (2, 2, 1, 1), (2, 1), (5, 4), (2, 2, 2, 2), (0, 0, 0, 0), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end0', 1, 4, (2, 2, 1, 1), (2, 2), (5, 5), (1, 1, 1, 0), (1, 1, 1, 0), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end1', 1, 4, (2, 2, 1, 1), (2, 2), (5, 5), (2, 2, 2, 1), (2, 2, 2, 1), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_end', 1, 4, (2, 2, 1, 1), (2, 2), (5, 5), (2, 2, 2, 2), (2, 2, 2, 2), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_start2', 2, 5, (2, 2, 1, 1), (3, 2), (6, 5), (2, 2, 2, 2), (2, 2, 2, 2), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('step2', 2, 5, (2, 2, 1, 1), (3, 2), (6, 5), (2, 2, 2, 2), (2, 2, 2, 2), 3, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('batch_end2', 2, 5, (2, 2, 1, 1), (3, 2), (6, 5), (2, 2, 2, 2), (2, 2, 2, 2), 4, False, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('epoch_end', 2, 5, (2, 2, 2, 1), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('train_end', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('after_fit', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end0', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (1, 1, 1, 0), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_batch_end1', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 1), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('val_end', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('after_validate', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (0, 0, 0, 0), (0, 0, 0, 0)),
    ('test_batch_end0', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (1, 1, 1, 0), (0, 0, 0, 0)),
    ('test_batch_end1', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (2, 2, 2, 1), (0, 0, 0, 0)),
    ('after_test', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (2, 2, 2, 2), (0, 0, 0, 0)),
    ('pred_batch_end0', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (2, 2, 2, 2), (1, 1, 1, 0)),
    ('pred_batch_end1', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (2, 2, 2, 2), (2, 2, 2, 1)),
    ('after_predict', 2, 5, (2, 2, 2, 2), (3, 3), (6, 6), (2, 2, 2, 2), (2, 2, 2, 2), 4, True, False, (2, 2, 2, 2), (2, 2, 2, 2), (2, 2, 2, 2)),
]


class Recording(BoringModel):
    def __init__(self):
        super().__init__()
        self.points = []

    def _at(self, where):
        self.points.append(_point(self.trainer, where))

    def on_train_start(self):
        self._at("train_start")

    def on_train_epoch_start(self):
        self._at("epoch_start")

    def on_train_batch_start(self, batch, batch_idx):
        self._at(f"batch_start{batch_idx}")

    def training_step(self, batch, batch_idx):
        self._at(f"step{batch_idx}")
        return super().training_step(batch, batch_idx)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self._at(f"batch_end{batch_idx}")

    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        self._at(f"val_batch_end{batch_idx}")

    def on_validation_end(self):
        self._at("val_end")

    def on_train_epoch_end(self):
        self._at("epoch_end")

    def on_train_end(self):
        self._at("train_end")

    def on_test_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        self._at(f"test_batch_end{batch_idx}")

    def on_predict_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        self._at(f"pred_batch_end{batch_idx}")


def test_progress_counts_read_as_lightning_records_them():
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2,
                         limit_predict_batches=2, accumulate_grad_batches=2, num_sanity_val_steps=1,
                         val_check_interval=2, **QUIET)
    model = Recording()
    model.points.append(_point(trainer, "before"))
    trainer.fit(model)
    model.points.append(_point(trainer, "after_fit"))
    trainer.validate(model, verbose=False)
    model.points.append(_point(trainer, "after_validate"))
    trainer.test(model, verbose=False)
    model.points.append(_point(trainer, "after_test"))
    trainer.predict(model)
    model.points.append(_point(trainer, "after_predict"))
    assert [p[0] for p in model.points] == [p[0] for p in LIGHTNING]
    for got, expected in zip(model.points, LIGHTNING):
        assert got == expected, got[0]


def test_the_batches_of_an_epoch_ended_by_minus_one_still_count_as_begun():
    class Stops(BoringModel):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 2 else None

    trainer = pl.Trainer(max_epochs=2, limit_train_batches=5, limit_val_batches=1, num_sanity_val_steps=0, **QUIET)
    trainer.fit(Stops())
    # Lightning 2.6: the batch that returned -1 is ready, never completed, in each epoch
    assert trainer.fit_loop.batch_idx == 2 and trainer.fit_loop.total_batch_idx == 5
    progress = trainer.fit_loop.epoch_loop.batch_progress
    assert (progress.current.ready, progress.current.completed) == (3, 2)
    assert (progress.total.ready, progress.total.completed) == (6, 4)
    assert trainer.global_step == 4 and trainer.is_last_batch


def test_max_epochs_set_on_the_fit_loop_runs_the_next_fit_that_long():
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    model = BoringModel()
    trainer.fit(model)
    assert trainer.fit_loop.done
    trainer.fit_loop.max_epochs = 3
    assert trainer.max_epochs == 3 and not trainer.fit_loop.done
    trainer.fit(model)
    assert trainer.current_epoch == 3 and trainer.global_step == 6
    assert trainer.fit_loop.epoch_progress.current.processed == 3
    with pytest.raises(ConfigurationError, match="max_epochs"):
        trainer.fit_loop.max_epochs = -5


def test_max_steps_set_on_the_epoch_loop_limits_the_next_fit():
    trainer = pl.Trainer(max_steps=1, limit_train_batches=4, limit_val_batches=0, **QUIET)
    model = BoringModel()
    trainer.fit(model)
    assert trainer.global_step == 1
    trainer.fit_loop.epoch_loop.max_steps += 2
    assert trainer.max_steps == 3 and trainer.fit_loop.max_steps == 3
    trainer.fit(model)
    assert trainer.global_step == 3


@pytest.mark.parametrize(("max_epochs", "max_steps", "done"), [(5, -1, False), (-1, 10, False), (0, -1, True),
                                                                (-1, 0, True), (-1, -1, False)])
def test_done_before_a_fit_follows_the_limits(max_epochs, max_steps, done):
    trainer = pl.Trainer(max_epochs=max_epochs, max_steps=max_steps, **QUIET)
    assert trainer.fit_loop.done is done
    assert trainer.fit_loop.max_epochs == max_epochs and trainer.fit_loop.max_batches == float("inf")


@pytest.mark.parametrize(("min_epochs", "min_steps", "stops_after"), [(None, None, 1), (3, None, 3), (None, 5, 3),
                                                                    (2, 5, 3)])
def test_should_stop_takes_effect_after_min_epochs_and_min_steps(min_epochs, min_steps, stops_after):
    seen = []

    class Stopping(BoringModel):
        def on_train_epoch_end(self):
            self.trainer.should_stop = True
            fit_loop = self.trainer.fit_loop
            seen.append((fit_loop.epoch_progress.current.processed, fit_loop._can_stop_early, fit_loop.done))

    # 2 steps per epoch; in on_train_epoch_end the epoch counts as processed (Lightning's rule for min_epochs)
    trainer = pl.Trainer(max_epochs=10, min_epochs=min_epochs, min_steps=min_steps, limit_train_batches=2,
                         limit_val_batches=0, **QUIET)
    trainer.fit(Stopping())
    assert trainer.current_epoch == stops_after
    assert [processed for processed, _, _ in seen] == list(range(1, stops_after + 1))
    assert [(can, done) for _, can, done in seen] == [(False, False)] * (stops_after - 1) + [(True, True)]


def test_the_counts_are_read_only_like_the_trainers():
    trainer = pl.Trainer(max_epochs=1, **QUIET)
    with pytest.raises(AttributeError, match="only the loop writes its counters"):
        trainer.fit_loop.epoch_progress.current.completed = 4
    with pytest.raises(AttributeError, match="only the loop writes its counters"):
        trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 3
    with pytest.raises(AttributeError):
        trainer.fit_loop.total_batch_idx = 3
    with pytest.raises(AttributeError):
        trainer.fit_loop.max_batches = 3
    assert trainer.current_epoch == 0 and trainer.global_step == 0
    assert repr(trainer.fit_loop.epoch_progress.current) == "Tracker(ready=0, started=0, processed=0, completed=0)"
    steps = trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total
    assert repr(steps) == "ReadyCompletedTracker(ready=0, completed=0)" and not hasattr(steps, "started")


def test_evaluation_loops_count_each_run_and_all_runs():
    trainer = pl.Trainer(limit_val_batches=3, limit_test_batches=2, **QUIET)
    model = BoringModel()
    trainer.validate(model, verbose=False)
    trainer.validate(model, verbose=False)
    assert _four(trainer.validate_loop.batch_progress.current) == (3, 3, 3, 3)
    assert _four(trainer.validate_loop.batch_progress.total) == (6, 6, 6, 6)
    assert trainer.validate_loop._max_batches == [3]
    trainer.test(model, verbose=False)
    assert _four(trainer.test_loop.batch_progress.total) == (2, 2, 2, 2)
    assert _four(trainer.fit_loop.epoch_loop.val_loop.batch_progress.total) == (0, 0, 0, 0)


def test_the_fits_validation_counts_restart_with_each_epoch(monkeypatch):
    clock = iter(range(0, 10_000, 2))
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    per_epoch = []

    class Model(BoringModel):
        def on_train_epoch_end(self):
            per_epoch.append(self.trainer.fit_loop.epoch_loop.val_loop.batch_progress.total.completed)

    # every 2 s of a clock that advances 2 s per reading: validation after every batch (Lightning: 5 in 5 steps)
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=1, val_check_interval="00:00:00:02",
                         num_sanity_val_steps=0, **QUIET)
    trainer.fit(Model())
    assert per_epoch == [3, 3]
    assert trainer.fit_loop.epoch_loop.val_loop.batch_progress.total.completed == 3


def test_setup_data_reads_the_fits_loaders_only_inside_it():
    seen = {}

    class Model(BoringModel):
        def on_fit_start(self):
            self.trainer.fit_loop.setup_data()
            seen["batches"] = self.trainer.num_training_batches

    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    with pytest.raises(ConfigurationError, match="fit_loop.setup_data"):
        trainer.fit_loop.setup_data()
    trainer.fit(Model())
    assert seen["batches"] == 2


def test_the_epoch_loop_reads_a_monitored_value_from_callback_metrics():
    class Logs(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("seen", float(batch_idx))
            return out

    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, **QUIET)
    assert trainer.fit_loop.epoch_loop._get_monitor_value("seen") is None
    trainer.fit(Logs())
    assert float(trainer.fit_loop.epoch_loop._get_monitor_value("seen")) == 1.0


def test_a_trainer_with_its_loop_views_still_pickles():
    import pickle

    trainer = pl.Trainer(max_epochs=3, **QUIET)
    copy = pickle.loads(pickle.dumps(trainer))
    assert copy.fit_loop.max_epochs == 3 and copy.fit_loop.epoch_progress.current.completed == 0
    assert copy.fit_loop.epoch_loop.val_loop.batch_progress.total.ready == 0


def test_an_evaluation_loops_setup_data_outside_its_run_says_when_ember_reads_the_loaders():
    trainer = pl.Trainer(**QUIET)
    with pytest.raises(ConfigurationError, match=r"test_loop.setup_data\(\) reads the loaders of a running trainer.test"):
        trainer.test_loop.setup_data()
    with pytest.raises(ConfigurationError, match=r"fit_loop.epoch_loop.val_loop.setup_data\(\)"):
        trainer.fit_loop.epoch_loop.val_loop.setup_data()
