"""Where ``self.log`` may run, as in Lightning: refused (with "You can't ... inside `<hook>`") in the hooks where
Lightning refuses it, allowed in the others; nothing leaks from one run into the next; an evaluation's epoch values
reach the loggers before ``on_validation_end``/``on_test_end``; a whole float limit above 1.0 counts batches."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
import ember.lightning as L
from ember.lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from ember.lightning.pytorch.loggers import Logger


def _trainer(**kwargs: Any) -> Any:
    options = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
                   num_sanity_val_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    options.update(kwargs)
    return L.Trainer(**options)


class _LogsIn(BoringModel):
    """Logs once from ``hook`` and keeps what happened."""

    def __init__(self, hook: str) -> None:
        super().__init__()
        self.hook, self.outcome = hook, None

    def attempt(self) -> None:
        if self.outcome is None:
            try:
                self.log(self.hook, 1.0)
                self.outcome = "logged"
            except ember.ConfigurationError as error:
                self.outcome = str(error)


def _hooked(hook: str) -> _LogsIn:
    model = _LogsIn(hook)
    method = getattr(model, hook)

    def call(*args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        model.attempt()
        return out

    setattr(model, hook, call)
    return model


REFUSED = ["on_validation_end", "on_train_end", "on_fit_end",
           "teardown", "setup", "on_validation_model_eval", "on_validation_model_train",
           "on_validation_model_zero_grad", "on_before_batch_transfer", "on_after_batch_transfer",
           "transfer_batch_to_device", "lr_scheduler_step", "on_save_checkpoint", "train_dataloader",
           "val_dataloader", "configure_callbacks"]
ALLOWED = ["on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end",
           "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_validation_start",
           "on_validation_epoch_start", "on_validation_batch_end", "on_validation_epoch_end", "on_train_epoch_end"]


@pytest.mark.parametrize("hook", REFUSED)
def test_log_refused_where_lightning_refuses_it(tmp_path: Any, hook: str) -> None:
    model = _hooked(hook)
    checkpointing = hook == "on_save_checkpoint"
    trainer = _trainer(default_root_dir=tmp_path, enable_checkpointing=checkpointing)
    trainer.fit(model)
    assert model.outcome is not None and model.outcome.startswith("You can't `self.log("), (hook, model.outcome)
    assert hook not in trainer.callback_metrics


@pytest.mark.parametrize("hook", ALLOWED)
def test_log_allowed_in_the_other_hooks(hook: str) -> None:
    model = _hooked(hook)
    trainer = _trainer(num_sanity_val_steps=0)  # the sanity check's values are forgotten when it ends
    trainer.fit(model)
    assert model.outcome == "logged"
    assert hook in trainer.callback_metrics


@pytest.mark.parametrize("hook", ["on_sanity_check_start", "on_sanity_check_end", "on_fit_start", "on_train_end"])
def test_log_refused_in_callback_hooks(hook: str) -> None:
    """A callback logs through the module (``pl_module.log``), as in Lightning: refused in the same hooks."""
    model = _LogsIn(hook)
    callback = L.Callback()
    setattr(callback, hook, lambda trainer, pl_module: pl_module.attempt())
    _trainer(callbacks=[callback]).fit(model)
    assert model.outcome is not None and model.outcome.startswith("You can't"), model.outcome


def test_refusal_names_the_hook() -> None:
    model = _hooked("on_validation_end")
    _trainer().fit(model)
    assert "inside `on_validation_end`" in model.outcome and "self.logger.experiment" in model.outcome


@pytest.mark.parametrize("hook", ["on_test_end", "on_test_model_eval", "on_test_model_train", "test_dataloader"])
def test_log_refused_in_test_hooks(hook: str) -> None:
    model = _hooked(hook)
    _trainer().test(model, verbose=False)
    assert model.outcome is not None and model.outcome.startswith("You can't"), model.outcome


def test_a_run_does_not_log_into_the_previous_runs_results() -> None:
    """After a fit, ``setup`` of the next ``test`` used to find the fit's results still open."""
    model = _LogsIn("setup")
    trainer = _trainer()
    trainer.fit(model)
    model.setup = lambda stage: model.attempt()  # type: ignore[method-assign]
    trainer.test(model, verbose=False)
    assert model.outcome is not None and model.outcome.startswith("You can't"), model.outcome


def test_log_in_predict_names_the_missing_result_collection() -> None:
    class Predicts(BoringModel):
        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("p", 1.0)
            return batch

    with pytest.raises(ember.ConfigurationError, match="result collection is not registered yet") as error:
        _trainer(limit_predict_batches=1).predict(Predicts())
    assert isinstance(error.value, RuntimeError)


class _Rows(Logger):
    name, version = "rows", 0

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.rows.append(sorted(metrics))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("stage", ["fit", "validate", "test"])
def test_epoch_values_reach_the_loggers_before_on_evaluation_end(stage: str) -> None:
    seen: list[list[list[str]]] = []

    class Model(BoringModel):
        def validation_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("v", 1.0)
            return super().validation_step(batch, batch_idx)

        def test_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("v", 1.0)
            return super().test_step(batch, batch_idx)

        def on_validation_end(self) -> None:
            seen.append(list(rows.rows))

        def on_test_end(self) -> None:
            seen.append(list(rows.rows))

    rows = _Rows()
    trainer = _trainer(logger=rows, num_sanity_val_steps=0)
    model = Model()
    if stage == "fit":
        trainer.fit(model)
    else:
        getattr(trainer, stage)(model, verbose=False)
    assert seen and ["epoch", "v"] in seen[0], seen


def test_whole_float_limit_above_one_counts_batches() -> None:
    trainer = _trainer(limit_test_batches=1e50, limit_val_batches=3.0)
    assert isinstance(trainer.limit_test_batches, int) and trainer.limit_test_batches == int(1e50)
    assert trainer.limit_val_batches == 3 and isinstance(trainer.limit_val_batches, int)
    trainer.test(BoringModel(), DataLoader(RandomDataset(32, 8), batch_size=2), verbose=False)
    assert trainer.num_test_batches == [4]
    with pytest.raises(ember.ConfigurationError, match="limit_test_batches"):
        _trainer(limit_test_batches=1.5)


def test_logging_in_allowed_hooks_costs_no_refusal_state() -> None:
    """The refusal is set only around the refused hooks: a plain fit leaves nothing behind."""
    trainer = _trainer()
    trainer.fit(BoringModel())
    ctx = trainer.loop.log_context
    assert ctx.refused_in is None and ctx.results is None


def _accuracy() -> Any:
    torchmetrics = pytest.importorskip("torchmetrics")
    return torchmetrics.classification.MulticlassAccuracy(num_classes=2)


class _LogsMetric(BoringModel):
    def __init__(self, keep: bool, attribute: str | None = None) -> None:
        super().__init__()
        if keep:
            self.acc = _accuracy()
        self.attribute = attribute

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        metric = _accuracy()
        metric(torch.tensor([0, 1]), torch.tensor([0, 1]))  # forward: a step value
        self.log("acc", metric, metric_attribute=self.attribute)
        return super().training_step(batch, batch_idx)


def test_a_metric_that_is_not_a_submodule_is_refused() -> None:
    with pytest.raises(ember.ConfigurationError, match="fix this by setting an attribute for the metric in your"):
        _trainer().fit(_LogsMetric(keep=False))
    with pytest.raises(ember.ConfigurationError,
                       match=r"`self.log\(acc, ..., metric_attribute=name\)` where `name` is one of \['acc'\]"):
        _trainer().fit(_LogsMetric(keep=True))
    trainer = _trainer()
    trainer.fit(_LogsMetric(keep=True, attribute="acc"))  # named where it is kept: as in Lightning, accepted
    assert "acc" in trainer.callback_metrics


def test_a_one_element_tensor_is_kept_as_a_scalar() -> None:
    class Logs(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("one", torch.tensor([1.5]), on_epoch=True)
            return super().training_step(batch, batch_idx)

    trainer = _trainer()
    trainer.fit(Logs())
    assert {k: v.ndim for k, v in trainer.callback_metrics.items()} == {"one": 0, "one_step": 0, "one_epoch": 0}


def test_a_stage_set_by_hand_outside_a_run_logs_into_it() -> None:
    """A unit test of a step sets the trainer and its stage by hand, as Lightning's own tests do."""
    model, trainer = BoringModel(), _trainer()
    trainer.state.stage = "train"
    model.trainer = trainer
    model.log("foo", torch.tensor([1.2]), on_epoch=True)
    assert trainer.callback_metrics["foo"].ndim == 0
    trainer.fit(model)  # a run afterwards starts clean
    assert "foo" not in trainer.callback_metrics
    with pytest.raises(RuntimeError, match="outside a step or hook of a running trainer"):
        model.log("bar", 1.0)  # no run, no stage set by hand
