"""What users rely on in the loop: step counting, ending epochs and fits, limits, validation schedule,
schedulers, manual optimization, data sources and logging."""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.testing import TinyClassifier, tiny_dataset, tiny_loaders

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def loader(batches: int, batch_size: int = 2, shuffle: bool = False) -> DataLoader:
    return DataLoader(tiny_dataset(n=batches * batch_size), batch_size=batch_size, shuffle=shuffle)


class Events:
    """Counts events and records where validation and optimizer steps happened."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.val_at: list[tuple[int, int]] = []  # (epoch, batches seen this epoch) at each validation start
        self.train_batches_in_epoch = 0
        self.sanity_val_batches = 0

    def on_train_epoch_start(self) -> None:
        self.count["on_train_epoch_start"] += 1
        self.train_batches_in_epoch = 0

    def on_train_epoch_end(self) -> None:
        self.count["on_train_epoch_end"] += 1

    def on_train_batch_end(self) -> None:
        self.count["train_batch"] += 1
        self.train_batches_in_epoch += 1

    def on_before_optimizer_step(self) -> None:
        self.count["optimizer_step"] += 1

    def on_validation_start(self, trainer: ember.Trainer) -> None:
        if trainer.sanity_checking:
            self.count["sanity"] += 1
        else:
            self.count["validation"] += 1
            self.val_at.append((trainer.current_epoch, self.train_batches_in_epoch))

    def on_validation_batch_end(self, trainer: ember.Trainer) -> None:
        key = "sanity_batch" if trainer.sanity_checking else "val_batch"
        self.count[key] += 1

    def on_test_batch_end(self) -> None:
        self.count["test_batch"] += 1

    def on_predict_batch_end(self) -> None:
        self.count["predict_batch"] += 1


def fit(model: Any = None, train: Any = None, val: Any = None, **kwargs: Any) -> tuple[ember.Trainer, Events]:
    events = Events()
    kwargs.setdefault("num_sanity_val_steps", 0)
    trainer = ember.Trainer(**QUIET, callbacks=[events, *kwargs.pop("callbacks", [])], **kwargs)
    trainer.fit(model if model is not None else TinyClassifier(), train if train is not None else loader(4), val)
    return trainer, events


# -- accumulation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("batches", "k", "steps_per_epoch"), [(8, 1, 8), (8, 2, 4), (7, 2, 4), (5, 3, 2), (1, 4, 1)])
def test_optimizer_steps_under_accumulation(batches: int, k: int, steps_per_epoch: int) -> None:
    trainer, events = fit(train=loader(batches), max_epochs=2, accumulate_grad_batches=k)
    assert events.count["optimizer_step"] == 2 * steps_per_epoch
    assert trainer.global_step == 2 * steps_per_epoch
    assert events.count["train_batch"] == 2 * batches


class Linear(ember.Module):
    """y = w.x with a squared loss: gradients are easy to compute by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return ((x @ self.w - y) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)  # lr 0: every window sees the same weights


class GradsAtStep:
    def __init__(self) -> None:
        self.grads: list[torch.Tensor] = []

    def on_before_optimizer_step(self, module: Any) -> None:
        self.grads.append(module.w.grad.clone())


def test_accumulated_loss_is_divided_by_k_including_the_incomplete_last_window() -> None:
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(6, 2, generator=g), torch.randn(6, generator=g)
    data = DataLoader(TensorDataset(x, y), batch_size=2)  # 3 batches; k=2: windows [0, 1] and [2]
    spy = GradsAtStep()
    fit(Linear(), data, max_epochs=1, accumulate_grad_batches=2, callbacks=[spy])

    w = torch.tensor([1.0, -2.0], requires_grad=True)

    def grad(rows: slice) -> torch.Tensor:
        w.grad = None
        (((x[rows] @ w - y[rows]) ** 2).mean()).backward()
        return w.grad.clone()

    expected = [(grad(slice(0, 2)) + grad(slice(2, 4))) / 2, grad(slice(4, 6)) / 2]
    assert len(spy.grads) == 2
    for got, want in zip(spy.grads, expected, strict=True):
        torch.testing.assert_close(got, want)


# -- ending epochs and fits ----------------------------------------------------------------------------------


class EndEpochAt:
    def __init__(self, batch_idx: int) -> None:
        self.batch_idx = batch_idx
        self.steps: Counter[int] = Counter()

    def on_train_batch_start(self, trainer: ember.Trainer, batch_idx: int) -> int | None:
        return -1 if batch_idx == self.batch_idx else None


class CountSteps(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.step_calls: Counter[int] = Counter()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.step_calls[self.current_epoch] += 1
        return super().training_step(batch, batch_idx)


def test_minus_one_from_on_train_batch_start_ends_the_epoch_not_the_fit() -> None:
    model = CountSteps()
    trainer, events = fit(model, loader(6), max_epochs=3, callbacks=[EndEpochAt(2)])
    assert model.step_calls == {0: 2, 1: 2, 2: 2}  # batch 2 is never trained on
    assert events.count["on_train_epoch_end"] == 3
    assert trainer.global_step == 6 and trainer.current_epoch == 3


@pytest.mark.parametrize(("max_steps", "k", "batches_run"), [(3, 1, 3), (2, 2, 4), (7, 1, 7)])
def test_max_steps_ends_mid_epoch(max_steps: int, k: int, batches_run: int) -> None:
    model = CountSteps()
    trainer, events = fit(model, loader(5), max_epochs=10, max_steps=max_steps, accumulate_grad_batches=k)
    assert trainer.global_step == max_steps
    assert events.count["train_batch"] == batches_run
    assert sum(model.step_calls.values()) == batches_run
    assert trainer.current_epoch == math.ceil(batches_run / 5)  # the interrupted epoch counts as done


def test_max_steps_without_max_epochs_runs_past_the_default_epoch_limit() -> None:
    trainer, events = fit(train=loader(1), max_steps=12)
    assert trainer.global_step == 12 and events.count["on_train_epoch_start"] == 12


class StopAt:
    def __init__(self, epoch: int, batch_idx: int | None = None) -> None:
        self.epoch, self.batch_idx = epoch, batch_idx

    def on_train_batch_end(self, trainer: ember.Trainer, batch_idx: int) -> None:
        if self.batch_idx is not None and trainer.current_epoch >= self.epoch and batch_idx >= self.batch_idx:
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: ember.Trainer) -> None:
        if self.batch_idx is None and trainer.current_epoch >= self.epoch:
            trainer.should_stop = True


@pytest.mark.parametrize(("min_epochs", "epochs_run"), [(None, 1), (0, 1), (3, 3)])
def test_should_stop_at_epoch_end_respects_min_epochs(caplog: pytest.LogCaptureFixture, min_epochs: int | None,
                                                      epochs_run: int) -> None:
    with caplog.at_level(logging.INFO, logger="ember"):
        trainer, events = fit(train=loader(3), max_epochs=10, min_epochs=min_epochs, callbacks=[StopAt(0)])
    assert events.count["on_train_epoch_end"] == epochs_run
    assert trainer.current_epoch == epochs_run
    said = [r.getMessage() for r in caplog.records if "has not been met" in r.getMessage()]
    assert said == ([] if epochs_run == 1 else  # once per fit, while should_stop waits
                    [f"trainer.should_stop was set, but `min_epochs={min_epochs}` or `min_steps=None` has not been met. "
                     "Training will continue until both are reached, then stop."])


def test_should_stop_mid_epoch_ends_after_the_current_batch() -> None:
    trainer, events = fit(train=loader(6), max_epochs=10, callbacks=[StopAt(1, batch_idx=2)])
    assert events.count["train_batch"] == 6 + 3
    assert trainer.current_epoch == 2
    # min_steps not reached yet: should_stop waits for it
    trainer, events = fit(train=loader(6), max_epochs=10, min_steps=10, callbacks=[StopAt(0, batch_idx=0)])
    assert trainer.global_step == 10


# -- limits ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "expected"), [(None, 10), (3, 3), (50, 10), (0.25, 2), (1.0, 10), (0.99, 9)])
def test_limit_train_batches(limit: Any, expected: int) -> None:
    trainer, events = fit(train=loader(10), max_epochs=2, limit_train_batches=limit)
    assert events.count["train_batch"] == 2 * expected
    assert trainer.num_training_batches == expected


def test_limit_train_batches_zero_skips_training() -> None:
    trainer, events = fit(train=loader(4), max_epochs=2, limit_train_batches=0)
    assert events.count["train_batch"] == 0 and trainer.global_step == 0


@pytest.mark.parametrize(("limit", "expected"), [(2, 2), (0.5, 3), (0, 0), (1.0, 6)])
def test_limit_val_test_predict_batches(limit: Any, expected: int) -> None:
    _, events = fit(train=loader(2), val=loader(6), max_epochs=1, limit_val_batches=limit)
    assert events.count["val_batch"] == expected
    assert events.count["validation"] == (1 if expected else 0)
    events = Events()
    trainer = ember.Trainer(**QUIET, callbacks=[events], limit_test_batches=limit, limit_predict_batches=limit)
    trainer.test(TinyClassifier(), loader(6), verbose=False)
    predictions = trainer.predict(TinyClassifier(), loader(6))
    assert events.count["test_batch"] == expected
    assert events.count["predict_batch"] == expected
    # limit 0 turns the stage off, as in Lightning: predict() returns None, as it does without return_predictions
    assert predictions is None if limit == 0 else len(predictions) == expected


def test_limit_fraction_that_selects_no_batch_is_an_error() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"limit_train_batches=0\.1.*0 of the 4"):
        fit(train=loader(4), max_epochs=1, limit_train_batches=0.1)


# -- when validation runs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "val_at"),
    [
        ({}, [(0, 6), (1, 6)]),
        ({"val_check_interval": 0.5}, [(0, 3), (0, 6), (1, 3), (1, 6)]),
        # a quarter of 6 batches rounds down to every batch, as in Lightning
        ({"val_check_interval": 0.25}, [(e, b) for e in (0, 1) for b in range(1, 7)]),
        ({"val_check_interval": 2}, [(0, 2), (0, 4), (0, 6), (1, 2), (1, 4), (1, 6)]),
        ({"val_check_interval": 4}, [(0, 4), (1, 4)]),
        # counted across epochs: batches 4, 8 and 12 of the 12
        ({"val_check_interval": 4, "check_val_every_n_epoch": None}, [(0, 4), (1, 2), (1, 6)]),
        ({"check_val_every_n_epoch": 2}, [(1, 6)]),
    ],
)
def test_validation_schedule(kwargs: dict[str, Any], val_at: list[tuple[int, int]]) -> None:
    _, events = fit(train=loader(6), val=loader(2), max_epochs=2, **kwargs)
    assert events.val_at == val_at


def test_check_val_every_n_epoch_over_several_epochs() -> None:
    _, events = fit(train=loader(2), val=loader(2), max_epochs=7, check_val_every_n_epoch=3)
    assert [epoch for epoch, _ in events.val_at] == [2, 5]


def test_val_check_interval_larger_than_an_epoch_is_an_error_unless_counted_across_epochs() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"val_check_interval=10.*check_val_every_n_epoch=None"):
        fit(train=loader(6), val=loader(2), max_epochs=2, val_check_interval=10)
    _, events = fit(train=loader(6), val=loader(2), max_epochs=4, val_check_interval=10, check_val_every_n_epoch=None)
    assert events.val_at == [(1, 4), (3, 2)]


@pytest.mark.parametrize(("fast_dev_run", "batches"), [(True, 1), (3, 3)])
def test_fast_dev_run(fast_dev_run: Any, batches: int) -> None:
    trainer, events = fit(train=loader(10), val=loader(10), max_epochs=5, fast_dev_run=fast_dev_run,
                          num_sanity_val_steps=2)
    assert events.count["train_batch"] == batches
    assert events.count["val_batch"] == batches
    assert events.count["sanity"] == 0
    assert events.count["on_train_epoch_end"] == 1
    assert trainer.global_step == batches
    events = Events()
    trainer = ember.Trainer(**QUIET, callbacks=[events], fast_dev_run=fast_dev_run)
    trainer.test(TinyClassifier(), loader(10), verbose=False)
    assert events.count["test_batch"] == batches


class LogsVal(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_marker", 100.0 if self.trainer.sanity_checking else 1.0)


@pytest.mark.parametrize(("steps", "expected"), [(0, 0), (2, 2), (-1, 5)])
def test_num_sanity_val_steps(steps: int, expected: int) -> None:
    seen: list[dict[str, float]] = []

    class AtTrainStart:
        def on_train_start(self, trainer: ember.Trainer) -> None:
            seen.append(dict(trainer.callback_metrics))

    trainer, events = fit(LogsVal(), loader(2), loader(5), max_epochs=1, num_sanity_val_steps=steps,
                          callbacks=[AtTrainStart()])
    assert events.count["sanity_batch"] == expected
    assert events.count["sanity"] == (1 if expected else 0)
    assert seen == [{}]  # sanity-check metrics are discarded
    assert float(trainer.callback_metrics["val_marker"]) == 1.0


# -- learning-rate schedulers ---------------------------------------------------------------------------------


class Scheduled(TinyClassifier):
    def __init__(self, scheduler: dict[str, Any], plateau: bool = False) -> None:
        super().__init__(lr=1.0)
        self.scheduler, self.plateau = scheduler, plateau

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("flat", 1.0)  # never improves

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        if self.plateau:
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0)
        else:
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, **self.scheduler}}


@pytest.mark.parametrize(
    ("scheduler", "k", "halvings"),
    [
        ({"interval": "step"}, 1, 8),  # 2 epochs x 4 optimizer steps
        ({"interval": "step"}, 2, 4),  # scheduler steps follow optimizer steps, not batches
        ({"interval": "step", "frequency": 3}, 1, 2),  # after steps 3 and 6
        ({"interval": "epoch"}, 1, 2),
        ({}, 1, 2),  # epoch is the default
        ({"interval": "epoch", "frequency": 2}, 1, 1),
    ],
)
def test_scheduler_interval_and_frequency(scheduler: dict[str, Any], k: int, halvings: int) -> None:
    model = Scheduled(scheduler)
    trainer, _ = fit(model, loader(4), max_epochs=2, accumulate_grad_batches=k)
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.5 ** halvings
    assert model.lr_schedulers() is trainer.lr_scheduler_configs[0].scheduler


def test_reduce_lr_on_plateau_reads_the_monitored_metric() -> None:
    model = Scheduled({"monitor": "flat"}, plateau=True)
    trainer, _ = fit(model, loader(2), loader(2), max_epochs=3)
    # epoch 0 sets the best value; epochs 1 and 2 do not improve on it (patience 0): two halvings
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.25


def test_reduce_lr_on_plateau_with_a_metric_never_logged_names_the_logged_ones() -> None:
    model = Scheduled({"monitor": "val_losss"}, plateau=True)
    with pytest.raises(ember.ConfigurationError, match=r"'val_losss', which was not logged.*'flat'"):
        fit(model, loader(2), loader(2), max_epochs=1)


def test_reduce_lr_on_plateau_without_monitor_is_an_error() -> None:
    with pytest.raises(ember.ConfigurationError, match="ReduceLROnPlateau needs a 'monitor'"):
        fit(Scheduled({}, plateau=True), loader(2), max_epochs=1)


# -- manual optimization with several optimizers ----------------------------------------------------------------


class TwoOptimizers(ember.Module):
    automatic_optimization = False

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 3)
        self.b = torch.nn.Linear(8, 3)
        self.steps = Counter[str]()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt_a, opt_b = self.optimizers()
        for name, layer, opt in (("a", self.a, opt_a), ("b", self.b, opt_b)):
            if name == "b" and batch_idx % 2:
                continue  # b steps every other batch
            loss = torch.nn.functional.cross_entropy(layer(x), y)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            self.steps[name] += 1

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)]


def test_several_optimizers_in_manual_optimization() -> None:
    model = TwoOptimizers()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer, events = fit(model, loader(4), max_epochs=1)
    assert model.steps == {"a": 4, "b": 2}
    assert trainer.global_step == 6  # every optimizer step counts
    assert events.count["optimizer_step"] == 6
    for key, value in model.state_dict().items():
        assert not torch.equal(value, before[key]), key


def test_several_optimizers_need_manual_optimization() -> None:
    class Auto(TwoOptimizers):
        automatic_optimization = True

    with pytest.raises(ember.ConfigurationError, match="returned 2 optimizers.*automatic_optimization = False"):
        fit(Auto(), loader(2), max_epochs=1)


# -- data sources -------------------------------------------------------------------------------------------------


class DataModule:
    """A Lightning-style DataModule: no base class."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str | None = None) -> None:  # the optional stage of older Lightning code
        self.calls.append(("setup", stage))

    def teardown(self, stage: str | None = None) -> None:
        self.calls.append(("teardown", stage))

    def on_train_start(self) -> None:  # any event hook on the DataModule fires as well
        self.calls.append("on_train_start")

    def train_dataloader(self) -> DataLoader:
        self.calls.append("train_dataloader")
        return loader(3)

    def val_dataloader(self) -> DataLoader:
        self.calls.append("val_dataloader")
        return loader(2)

    def test_dataloader(self) -> DataLoader:
        self.calls.append("test_dataloader")
        return loader(5)

    def predict_dataloader(self) -> DataLoader:
        self.calls.append("predict_dataloader")
        return loader(4)


def test_datamodule_supplies_data_and_its_hooks_fire() -> None:
    dm = DataModule()
    events = Events()
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, callbacks=[events])
    trainer.fit(TinyClassifier(), datamodule=dm)
    assert dm.calls == ["prepare_data", ("setup", "fit"), "train_dataloader", "val_dataloader", "on_train_start",
                        ("teardown", "fit")]
    assert events.count["train_batch"] == 3 and events.count["val_batch"] == 2
    assert trainer.datamodule is dm and dm.trainer is trainer
    dm.calls.clear()
    trainer.test(TinyClassifier(), datamodule=dm, verbose=False)
    assert dm.calls == ["prepare_data", ("setup", "test"), "test_dataloader", ("teardown", "test")]
    assert events.count["test_batch"] == 5
    # a DataModule passed where loaders go is recognised as one
    assert len(trainer.predict(TinyClassifier(), dm)) == 4


def test_loaders_from_the_modules_dataloader_methods() -> None:
    class WithData(TinyClassifier):
        def train_dataloader(self) -> DataLoader:
            return loader(3)

        def val_dataloader(self) -> DataLoader:
            return loader(2)

        def test_dataloader(self) -> DataLoader:
            return loader(4)

    events = Events()
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, callbacks=[events])
    trainer.fit(WithData())
    trainer.test(WithData(), verbose=False)
    assert (events.count["train_batch"], events.count["val_batch"], events.count["test_batch"]) == (3, 2, 4)


def test_no_training_data_is_an_error() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"no training data.*train_dataloader\(\)"):
        ember.Trainer(**QUIET, max_epochs=1).fit(TinyClassifier())


def test_setup_and_teardown_receive_the_stage_even_when_it_has_a_default() -> None:
    stages: list[Any] = []

    class Optional(TinyClassifier):
        def setup(self, stage: str | None = None) -> None:
            stages.append(("setup", stage))

        def teardown(self, stage: str | None = None) -> None:
            stages.append(("teardown", stage))

    ember.Trainer(**QUIET, limit_val_batches=1).validate(Optional(), loader(2), verbose=False)
    assert stages == [("setup", "validate"), ("teardown", "validate")]


# -- logging ------------------------------------------------------------------------------------------------------


class Logs(ember.Module):
    """Logs the batch index in every way ``self.log`` allows; batch sizes 4, 4, 2."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        i = float(batch_idx)
        self.log("default", i)  # training: on_step only
        self.log("both", i, on_step=True, on_epoch=True, prog_bar=True)
        self.log("mean", i, on_step=False, on_epoch=True)  # weighted by batch size
        self.log("sum", torch.tensor(i), on_epoch=True, on_step=False, reduce_fx="sum")
        self.log("max", i, on_epoch=True, on_step=False, reduce_fx=torch.max)
        self.log("fixed_size", i, on_epoch=True, on_step=False, batch_size=1)
        self.log_dict({"d1": i, "d2": 2 * i}, on_step=False, on_epoch=True, reduce_fx="max")
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def on_train_epoch_end(self) -> None:
        self.log("from_epoch_end", 42.0)  # epoch-level hook: logged once, on_epoch

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_metric", float(batch_idx))  # evaluation: on_epoch, mean

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_self_log_options_and_callback_metrics() -> None:
    data = DataLoader(tiny_dataset(n=10), batch_size=4)
    trainer, _ = fit(Logs(), data, DataLoader(tiny_dataset(n=6), batch_size=2), max_epochs=1)
    m = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert m == {
        "default": 2.0,
        "both_step": 2.0, "both_epoch": pytest.approx(0.8), "both": pytest.approx(0.8),
        "mean": pytest.approx((0 * 4 + 1 * 4 + 2 * 2) / 10),
        "sum": 3.0,
        "max": 2.0,
        "fixed_size": 1.0,
        "d1": 2.0, "d2": 4.0,
        "from_epoch_end": 42.0,
        "val_metric": 1.0,
    }
    assert set(trainer.progress_bar_metrics) == {"both_step", "both_epoch"}


def test_self_log_rejects_bad_values_with_the_metric_name() -> None:
    class Bad(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("vector", torch.ones(3))
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=r"self.log\('vector'.*shape \(3,\)"):
        fit(Bad(), loader(1), max_epochs=1)


def test_validate_and_test_return_epoch_metrics_like_lightning() -> None:
    model = TinyClassifier()
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0)
    train, val = tiny_loaders(n=16, batch_size=4)
    trainer.fit(model, train, val)
    out = trainer.validate(model, val, verbose=False)
    assert isinstance(out, list) and len(out) == 1
    assert set(out[0]) == {"val_loss", "val_acc"}
    assert all(isinstance(v, float) for v in out[0].values())
    assert out[0]["val_acc"] == pytest.approx(float(trainer.callback_metrics["val_acc"]))
    # the numbers are the real epoch means
    with torch.no_grad():
        x, y = val.dataset.tensors
        acc = (model(x).argmax(1) == y).float().mean().item()
    assert out[0]["val_acc"] == pytest.approx(acc)
    test_out = trainer.test(model, val, verbose=False)
    assert test_out == [{"test_acc": pytest.approx(acc)}]


class TwoLoaders(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(dataloader_idx)
        self.log("marker", float(dataloader_idx + 1))


def test_several_validation_loaders_with_dataloader_idx() -> None:
    model = TwoLoaders()
    trainer = ember.Trainer(**QUIET)
    out = trainer.validate(model, [loader(3), loader(2)], verbose=False)
    assert model.seen == [0, 0, 0, 1, 1]
    assert out == [{"marker/dataloader_idx_0": 1.0}, {"marker/dataloader_idx_1": 2.0}]
    assert float(trainer.callback_metrics["marker/dataloader_idx_1"]) == 2.0


def test_predict_returns_one_list_per_loader_when_several() -> None:
    trainer = ember.Trainer(**QUIET)
    one = trainer.predict(TinyClassifier(), loader(3, batch_size=2))
    assert len(one) == 3 and all(p.shape == (2,) for p in one)
    two = trainer.predict(TinyClassifier(), [loader(3), loader(1)])
    assert [len(p) for p in two] == [3, 1]
    assert trainer.predict(TinyClassifier(), loader(3), return_predictions=False) is None


# -- plain torch.nn.Module --------------------------------------------------------------------------------------


class Plain(torch.nn.Module):
    """No ember base class: just the methods the loop calls."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.epoch_ends = 0

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), y)}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_train_epoch_end(self) -> None:  # a hook method without any marker
        self.epoch_ends += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_a_plain_torch_module_trains() -> None:
    model = Plain()
    x, y = tiny_dataset(n=64).tensors
    before = torch.nn.functional.cross_entropy(model.net(x), y).item()
    trainer, _ = fit(model, DataLoader(TensorDataset(x, y), batch_size=16), loader(2), max_epochs=10)
    after = torch.nn.functional.cross_entropy(model.net(x), y).item()
    assert trainer.global_step == 40
    assert model.epoch_ends == 10
    assert after < before * 0.7


def test_hook_arguments_with_defaults_are_passed() -> None:
    """``dataloader_idx=0`` in a hook's signature still receives the real index (a single implementation of
    a firstresult hook is called directly, outside pluggy, and must pass it the same way)."""

    class Transfers(TwoLoaders):
        def __init__(self) -> None:
            super().__init__()
            self.after: list[int] = []

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int = 0) -> Any:
            self.after.append(dataloader_idx)
            return batch

    model = Transfers()
    ember.Trainer(**QUIET).validate(model, [loader(1), loader(2)], verbose=False)
    assert model.after == [0, 1, 1]


def test_on_train_batch_end_receives_the_detached_loss() -> None:
    seen: list[Any] = []

    class Outputs:
        def on_train_batch_end(self, outputs: Any) -> None:
            seen.append(outputs)

    class ReturnsDict(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            return {"loss": loss, "extra": batch_idx} if batch_idx else loss

    fit(ReturnsDict(), loader(2), max_epochs=1, callbacks=[Outputs()])
    assert [sorted(o) for o in seen] == [["loss"], ["extra", "loss"]]
    assert all(not o["loss"].requires_grad and o["loss"].dim() == 0 for o in seen)
    assert seen[1]["extra"] == 1


@pytest.mark.parametrize("inference_mode", [True, False])
def test_evaluation_mode_and_grad_context(inference_mode: bool) -> None:
    modes: list[tuple[str, bool, bool, bool]] = []

    class Modes(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            modes.append(("train", self.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            modes.append(("val", self.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

    fit(Modes(), loader(1), loader(1), max_epochs=2, inference_mode=inference_mode)
    assert modes == [("train", True, True, False), ("val", False, False, inference_mode)] * 2


# -- step signatures -----------------------------------------------------------------------------------------

def _wrap_like_fsdp(module: torch.nn.Module, name: str) -> None:
    """What FSDP2's ``register_fsdp_forward_method`` does: a ``functools.wraps`` wrapper of the bound method,
    bound to the module again (so its reported signature loses one more parameter)."""
    import functools

    original = getattr(module, name)

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    setattr(module, name, wrapped.__get__(module, type(module)))


class _OtherNames(TinyClassifier):
    """Steps whose second parameter is not called ``batch_idx``, and one step that takes the batch only."""

    def training_step(self, b: Any, i: int) -> Any:
        assert isinstance(i, int)
        return super().training_step(b, i)

    def validation_step(self, b: Any, i: int) -> None:
        assert isinstance(i, int)
        super().validation_step(b, i)

    def test_step(self, b: Any) -> None:
        assert not isinstance(b, int)


def test_steps_wrapped_on_the_instance_get_the_arguments_they_declare() -> None:
    model = _OtherNames()
    for name in ("training_step", "validation_step", "test_step"):
        _wrap_like_fsdp(model, name)
    trainer = ember.Trainer(**QUIET, max_steps=2, num_sanity_val_steps=1, limit_val_batches=1,
                            enable_checkpointing=False)
    trainer.fit(model, loader(2), loader(1))
    trainer.test(model, loader(1))
    assert trainer.global_step == 2
    plain = _OtherNames()  # the class's own, unwrapped steps on another instance still get theirs
    ember.Trainer(**QUIET, max_steps=1, enable_checkpointing=False).fit(plain, loader(1))


# -- estimated_stepping_batches ----------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, -1), ({"max_steps": 7}, 7), ({"max_epochs": 3}, -1), ({"max_epochs": 3, "max_steps": 7}, 7),
    ({"max_epochs": -1}, math.inf), ({"max_epochs": -1, "max_steps": 5}, 5)])
def test_estimated_stepping_batches_before_a_fit_answers_as_lightning(kwargs: dict[str, Any], expected: float) -> None:
    """Lightning (2.6) answers ``max_steps`` while the training batches are unknown, ``inf`` for endless runs."""
    assert ember.Trainer(**QUIET, **kwargs).estimated_stepping_batches == expected


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"max_epochs": 3}, 12), ({"max_epochs": 3, "max_steps": 4}, 4), ({"max_epochs": 1, "max_steps": 50}, 4),
    ({"max_epochs": 2, "accumulate_grad_batches": 3}, 4)])
def test_estimated_stepping_batches_in_a_fit(kwargs: dict[str, Any], expected: int) -> None:
    seen: list[float] = []

    class Reads(TinyClassifier):
        def configure_optimizers(self) -> Any:
            seen.append(self.trainer.estimated_stepping_batches)
            return super().configure_optimizers()

    fit(Reads(), loader(4) if "accumulate_grad_batches" not in kwargs else loader(5), enable_checkpointing=False,
        **kwargs)
    assert seen == [expected]
