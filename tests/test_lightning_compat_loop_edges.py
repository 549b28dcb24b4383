"""Edge cases of the training loop, run with Lightning's names and compared with what Lightning does
(tests/lightning/loop_edges.json, recorded by tests/lightning/record_loop_edges.py on Lightning itself): the
learning-rate schedulers of an epoch that ``-1`` from ``on_train_batch_start`` ends, and the training bar's
length in a fit that only ``max_steps`` bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lightning.recorded import on_ember as run_on_ember
from tests.lightning.recorded import recorded

RECORDED = recorded("loop_edges.json")


@pytest.fixture(scope="module")
def on_ember() -> dict:
    return run_on_ember("record_loop_edges")


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_same_as_lightning(on_ember: dict, case: str) -> None:
    assert on_ember[case] == RECORDED[case]


@pytest.mark.parametrize("logger", [True, "csv", False])
def test_a_fast_dev_run_writes_no_run_folder_with_ember_s_own_names(tmp_path: Path, logger: object) -> None:
    import ember
    from ember.core.api.null_logger import NullLogger
    from ember.testing import TinyClassifier, tiny_loaders

    class Probe(TinyClassifier):
        def training_step(self, batch, batch_idx):
            if self.logger is not None:
                self.logger.experiment.add_histogram("w", self.net[0].weight)  # a logger's own API: goes nowhere
            return super().training_step(batch, batch_idx)

    trainer = ember.Trainer(accelerator="cpu", default_root_dir=tmp_path, fast_dev_run=2, logger=logger,
                            enable_progress_bar=False)
    trainer.fit(Probe(), *tiny_loaders())
    assert list(tmp_path.rglob("*")) == []
    if logger is False:
        assert trainer.loggers == []
    else:
        assert [type(x) for x in trainer.loggers] == [NullLogger] and trainer.log_dir == str(tmp_path)


def test_the_dummy_logger_of_a_fast_dev_run_is_no_checkpoint_callback(tmp_path: Path) -> None:
    """Lightning's DummyLogger answers any attribute (``best_model_path`` too): it is a logger, not a checkpoint
    callback, and a predict run that looks for a checkpoint to load does not take it for one."""
    import ember.lightning.pytorch as pl
    from ember.lightning.pytorch.demos.boring_classes import BoringModel
    from ember.lightning.pytorch.loggers.logger import DummyLogger

    trainer = pl.Trainer(accelerator="cpu", default_root_dir=tmp_path, fast_dev_run=True, enable_progress_bar=False)
    model = BoringModel()
    assert isinstance(trainer.logger, DummyLogger)
    assert [type(c).__name__ for c in trainer.checkpoint_callbacks] == ["ModelCheckpoint"]
    predictions = trainer.predict(model, dataloaders=model.train_dataloader())
    assert len(predictions) == 1


def test_the_stand_in_loggers_pickle_and_copy_for_spawned_processes() -> None:
    """They answer any name a logger's user may call, but not Python's own protocols: a Trainer sent to spawned
    processes (strategy='ddp_spawn') under fast_dev_run pickles them."""
    import copy
    import pickle

    from ember.core.api.null_logger import NullLogger
    from ember.lightning.pytorch.loggers.logger import DummyExperiment, DummyLogger

    for logger in (NullLogger(), DummyLogger()):
        again = pickle.loads(pickle.dumps(logger))
        assert type(again) is type(logger) and type(copy.deepcopy(logger)) is type(logger)
        again.experiment.add_histogram("w", 1)  # any call is taken, and records nothing
    assert pickle.loads(pickle.dumps(DummyExperiment())).log_metric("x", 1) is None
