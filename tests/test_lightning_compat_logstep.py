"""What reaches a logger, and when, on a Trainer taken through Lightning's names, compared with what Lightning
does (tests/lightning/logger_calls.json, recorded by tests/lightning/record_logger_calls.py on Lightning itself):
each ``log_metrics`` call's step and values and each ``log_hyperparams`` call."""

from __future__ import annotations

import pytest

from ember import hookimpl as ember_hookimpl
from tests.lightning.recorded import on_ember as run_on_ember
from tests.lightning.recorded import recorded

RECORDED = recorded("logger_calls.json")


@pytest.fixture(scope="module")
def on_ember() -> dict:
    return run_on_ember("record_logger_calls")


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_same_as_lightning(on_ember: dict, case: str) -> None:
    assert on_ember[case] == RECORDED[case]


class _Recorder:
    """An ember logger plugin that keeps what the loggers are given."""

    role = "logger"

    def __init__(self) -> None:
        self.calls: list = []

    @ember_hookimpl()
    def log_metrics(self, metrics: dict, step: int) -> None:
        self.calls.append(["metrics", step, sorted(metrics)])

    @ember_hookimpl()
    def log_hyperparams(self, params: dict, saved: bool) -> None:
        self.calls.append(["hparams", sorted(params), saved])


def _logging_model():
    import torch

    from ember.testing import TinyClassifier

    class Model(TinyClassifier):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__(lr=lr)
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            self.log("t", float(batch_idx))
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch, batch_idx):
            self.log("v", float(batch_idx), on_step=True, on_epoch=True)

    return Model


def test_ember_s_own_trainer_keeps_its_step_axis() -> None:
    """``ember.Trainer`` (not taken through Lightning's names) writes at ``global_step``, the step that just ran
    included, and no row per evaluation batch; the hyperparameters reach the loggers at each entry point."""
    import ember
    from ember.testing import tiny_loaders

    recorder = _Recorder()
    train, val = tiny_loaders(n=32, batch_size=8)  # 4 batches
    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, logger=recorder, log_every_n_steps=2,
                            enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0)
    model = _logging_model()()
    trainer.fit(model, train, val)
    trainer.validate(model, val, verbose=False)
    assert recorder.calls == [
        ["hparams", ["lr"], True],
        ["metrics", 2, ["epoch", "t"]], ["metrics", 4, ["epoch", "t"]],
        ["metrics", 4, ["epoch", "v_epoch"]],  # the validation's epoch values
        ["hparams", ["lr"], True],  # validate()
        ["metrics", 4, ["epoch", "v_epoch"]],
    ]


def test_lightning_s_trainer_writes_each_evaluation_batch_at_its_dataloader_s_count() -> None:
    """Through Lightning's names: the rows of a fit at the batches that stepped before, and a validation's per-step
    values after each of its batches, counted on over the fit's validations."""
    import ember.lightning.pytorch as pl
    from ember.testing import tiny_loaders

    recorder = _Recorder()
    train, val = tiny_loaders(n=32, batch_size=8)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=recorder, log_every_n_steps=2, limit_val_batches=2,
                         enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=1)
    trainer.fit(_logging_model()(), train, val)
    rows = [[c[1], c[2]] for c in recorder.calls if c[0] == "metrics"]
    assert rows == [[1, ["epoch", "t"]], [3, ["epoch", "t"]], [0, ["v_step"]], [1, ["v_step"]], [3, ["epoch", "v_epoch"]],
                    [5, ["epoch", "t"]], [7, ["epoch", "t"]], [2, ["v_step"]], [3, ["v_step"]],
                    [7, ["epoch", "v_epoch"]]]


def test_a_logger_method_replaced_on_the_class_is_called_by_name_and_never_compared(tmp_path, monkeypatch) -> None:
    """Lightning's tests patch ``TensorBoardLogger.log_metrics`` on the class: the Trainer calls the replacement as
    Lightning does (by name), and the cached reading of the class does not ask it ``==``."""
    from unittest import mock

    import ember.lightning.pytorch as pl
    from ember.lightning.pytorch.demos.boring_classes import BoringModel
    from ember.lightning.pytorch.loggers import TensorBoardLogger

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("t", float(batch_idx))
            return super().training_step(batch, batch_idx)

    for _ in range(2):  # the second Trainer reads the class from the cache, with another mock in it
        replaced = mock.MagicMock()
        monkeypatch.setattr(TensorBoardLogger, "log_metrics", replaced)
        trainer = pl.Trainer(accelerator="cpu", default_root_dir=tmp_path, max_steps=2, limit_val_batches=0,
                             log_every_n_steps=1, logger=TensorBoardLogger(tmp_path), enable_progress_bar=False)
        trainer.fit(Model())
        assert replaced.mock_calls[:2] == [mock.call(metrics=mock.ANY, step=0), mock.call(metrics=mock.ANY, step=1)]


@pytest.mark.parametrize("saved", [True, False])
def test_tensorboard_s_placeholder_metric_only_where_hyperparameters_were_saved(tmp_path, monkeypatch, saved) -> None:
    import ember
    from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger
    from ember.testing import TinyClassifier, tiny_loaders

    class Model(TinyClassifier):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__(lr=lr)
            if saved:
                self.save_hyperparameters()

    written: list = []
    monkeypatch.setattr(TensorBoardLogger, "log_metrics", lambda self, *args, **kwargs: written.append((args, kwargs)))
    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, logger=TensorBoardLogger(tmp_path), log_every_n_steps=50,
                            enable_progress_bar=False, enable_checkpointing=False, limit_val_batches=0)
    trainer.fit(Model(), tiny_loaders()[0])
    placeholder = (({"hp_metric": -1}, None), {})
    assert (placeholder in written) is saved
    assert (tmp_path / "ember_logs" / "version_0" / "hparams.yaml").exists()


def test_a_logger_is_finalized_once_as_failed_after_an_exception(tmp_path, monkeypatch) -> None:
    import ember
    from ember.plugins.loggers.tensorboard_logger import TensorBoardLogger
    from ember.testing import TinyClassifier, tiny_loaders

    class Failing(TinyClassifier):
        def on_fit_start(self) -> None:
            raise ValueError("stop here")

    statuses: list = []
    monkeypatch.setattr(TensorBoardLogger, "finalize", lambda self, status="success": statuses.append(status))
    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, logger=TensorBoardLogger(tmp_path),
                            enable_progress_bar=False, enable_checkpointing=False)
    with pytest.raises(ValueError, match="stop here"):
        trainer.fit(Failing(), *tiny_loaders())
    assert statuses == ["failed"]


def test_a_logger_object_that_answers_no_hook_is_used_as_lightning_uses_it(tmp_path) -> None:
    """An object with Lightning's logger methods and no ember hook (a duck-typed logger) is given the rows, the
    hyperparameters, the graph and its ``finalize`` as Lightning's Trainer gives them; ``trainer.logger`` is the
    object itself."""
    import ember.lightning.pytorch as pl
    from ember.lightning.pytorch.demos.boring_classes import BoringModel

    class Duck:
        def __init__(self) -> None:
            self.calls: list = []

        def log_metrics(self, metrics, step=None):
            self.calls.append(("log_metrics", step, sorted(metrics)))

        def log_hyperparams(self, params):
            self.calls.append(("log_hyperparams", dict(params)))

        def log_graph(self, model):
            self.calls.append(("log_graph", type(model).__name__))

        def save(self):
            self.calls.append(("save",))

        def finalize(self, status):
            self.calls.append(("finalize", status))

    class Model(BoringModel):
        def __init__(self, width: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch, batch_idx):
            self.log("t", float(batch_idx))
            return super().training_step(batch, batch_idx)

    duck = Duck()
    trainer = pl.Trainer(accelerator="cpu", default_root_dir=tmp_path, max_steps=1, limit_val_batches=0,
                         log_every_n_steps=1, logger=duck, enable_progress_bar=False, enable_checkpointing=False)
    assert trainer.logger is duck and trainer.loggers == [duck] and duck not in trainer.callbacks
    trainer.fit(Model())
    assert duck.calls == [("log_hyperparams", {"width": 4}), ("log_graph", "Model"), ("save",),
                          ("log_metrics", 0, ["epoch", "t"]), ("save",), ("finalize", "success")]
