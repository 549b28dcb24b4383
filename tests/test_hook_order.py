"""Golden hook-order tests: every hook call of a run, recorded through pluggy's hook-call monitoring
(``ember.testing.HookRecorder``), against the order of design.md section 5 written out here by hand. The same
order, recorded from Lightning 2.6 itself, is checked by tests/test_lightning_differential.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember
from ember.testing import HookRecorder, TinyClassifier, tiny_loaders

#: Trainer arguments that keep tests quiet: no progress bar, model summary, logger or checkpoint files.
QUIET = {"accelerator": "cpu",
         "enable_progress_bar": False, "enable_model_summary": False, "logger": False, "enable_checkpointing": False}


class Recorder(HookRecorder):
    """A HookRecorder that can also mark calls that are not hooks (``configure_optimizers``)."""

    def mark(self, name: str) -> None:
        self.calls.append((name, []))
        self.kwargs.append({})


class Hooked(TinyClassifier):
    """TinyClassifier that alters batches around the transfer and marks ``configure_optimizers``."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def on_before_batch_transfer(self, batch: Any) -> Any:
        return batch

    def on_after_batch_transfer(self, batch: Any) -> Any:
        return batch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self.recorder.mark("configure_optimizers")
        return super().configure_optimizers()


def run_start() -> list[str]:
    """Every run (fit, validate, test, predict) opens like this."""
    return ["distributed_info", "root_device", "prepare_data", "setup", "model_sharded_context", "configure_model"]


def transfer() -> list[str]:
    return ["on_before_batch_transfer", "batch_to_device", "on_after_batch_transfer"]


def train_batch(*, zero_grad: bool = True, opt_step: bool = True, clip: bool = False) -> list[str]:
    """One training micro-batch under automatic optimization."""
    out = [*transfer(), "on_train_batch_start", "step"]
    if zero_grad:
        out += ["on_before_zero_grad", "zero_grad"]
    out += ["on_before_backward", "backward", "on_after_backward"]
    if opt_step:
        out += ["unscale_gradients", "on_before_optimizer_step"]
        if clip:
            out += ["clip_gradients"]
        out += ["optimizer_step"]
    return out + ["on_train_batch_end"]


def validation_run(batches: int) -> list[str]:
    """One validation run; on_validation_model_train ends it in trainer.validate() too, as in Lightning
    (tests/lightning/loop.json, scenario hook_order_accumulation)."""
    out = ["on_validation_model_eval", "on_validation_start", "on_validation_epoch_start"]
    for _ in range(batches):
        out += [*transfer(), "on_validation_batch_start", "step", "on_validation_batch_end"]
    out += ["on_validation_epoch_end", "on_validation_end"]
    return out + ["on_validation_model_train"]


def record(trainer_kwargs: dict[str, Any], run: str = "fit", module_cls: type = Hooked, **data: Any) -> list[str]:
    recorder = Recorder()
    trainer = ember.Trainer(**{**QUIET, **trainer_kwargs})
    recorder.attach(trainer)
    model = module_cls(recorder)
    train, val = tiny_loaders(n=32, batch_size=4)
    if run == "fit":
        trainer.fit(model, train, val)
    else:
        getattr(trainer, run)(model, val)
    return recorder.names


def test_fit_with_sanity_check_and_validation() -> None:
    names = record(dict(max_epochs=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1,
                        gradient_clip_val=1.0))
    epoch = ["on_train_epoch_start", *train_batch(clip=True), *train_batch(clip=True),
             "on_validation_model_zero_grad", *validation_run(1), "on_train_epoch_end"]
    expected = [
        *run_start(),
        "configure_optimizers",
        "setup_module",
        "on_fit_start",
        # the validation loader when validation first runs, the training loader when training starts
        "on_sanity_check_start", "process_dataloader", *validation_run(1), "on_sanity_check_end",
        "process_dataloader",
        "on_train_start",
        *epoch,
        *epoch,
        "on_train_end",
        "on_fit_end",
        "teardown",
    ]
    assert names == expected


def test_fit_without_validation_data_or_sanity_steps() -> None:
    recorder = Recorder()
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)
    recorder.attach(trainer)
    trainer.fit(Hooked(recorder), tiny_loaders(n=8, batch_size=4)[0])
    assert recorder.names == [
        *run_start(), "configure_optimizers", "setup_module", "on_fit_start", "process_dataloader",
        "on_train_start", "on_train_epoch_start", *train_batch(), "on_train_epoch_end", "on_train_end",
        "on_fit_end", "teardown",
    ]


def test_accumulation_with_incomplete_last_window() -> None:
    # 5 batches, k=2: windows [0, 1], [2, 3], [4] -- the last one steps on the epoch's last batch.
    names = record(dict(max_epochs=1, limit_train_batches=5, accumulate_grad_batches=2, num_sanity_val_steps=0,
                        limit_val_batches=0))
    assert names == [
        *run_start(), "configure_optimizers", "setup_module",  # limit_val_batches=0: no validation loader
        "on_fit_start", "process_dataloader", "on_train_start", "on_train_epoch_start",
        *train_batch(zero_grad=True, opt_step=False),
        *train_batch(zero_grad=False, opt_step=True),
        *train_batch(zero_grad=True, opt_step=False),
        *train_batch(zero_grad=False, opt_step=True),
        *train_batch(zero_grad=True, opt_step=True),
        "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown",
    ]


class ManualHooked(Hooked):
    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        opt = self.optimizers()
        loss = torch.nn.functional.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


def test_manual_optimization() -> None:
    names = record(dict(max_epochs=1, limit_train_batches=2, limit_val_batches=0, num_sanity_val_steps=0),
                   module_cls=ManualHooked)
    batch = [*transfer(), "on_train_batch_start",
             "step",  # training_step runs the rest inside the step hook
             "on_before_backward", "backward", "on_after_backward",
             "unscale_gradients", "on_before_optimizer_step", "optimizer_step",
             "on_train_batch_end"]
    assert names == [
        *run_start(), "configure_optimizers", "setup_module",
        "on_fit_start", "process_dataloader", "on_train_start", "on_train_epoch_start", *batch, *batch, "on_train_epoch_end",
        "on_train_end", "on_fit_end", "teardown",
    ]


def test_validate() -> None:
    names = record(dict(limit_val_batches=2), run="validate")
    assert names == [*run_start(), "process_dataloader", *validation_run(2), "teardown"]


def test_test() -> None:
    names = record(dict(limit_test_batches=2), run="test")
    batch = [*transfer(), "on_test_batch_start", "step", "on_test_batch_end"]
    assert names == [
        *run_start(), "process_dataloader", "on_test_model_eval", "on_test_start", "on_test_epoch_start",
        *batch, *batch, "on_test_epoch_end", "on_test_end", "on_test_model_train", "teardown",
    ]


def test_predict() -> None:
    names = record(dict(limit_predict_batches=2), run="predict")
    batch = [*transfer(), "on_predict_batch_start", "step", "on_predict_batch_end"]
    assert names == [
        *run_start(), "process_dataloader", "on_predict_model_eval", "on_predict_start", "on_predict_epoch_start",
        *batch, *batch, "on_predict_epoch_end", "on_predict_end", "teardown",
    ]


class FailsOnSecondBatch(Hooked):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 1:
            raise RuntimeError("boom in training_step")
        return super().training_step(batch, batch_idx)


def test_exception_in_training_step_runs_on_exception_then_teardown_and_propagates() -> None:
    recorder = Recorder()
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0)
    recorder.attach(trainer)
    with pytest.raises(RuntimeError, match="boom in training_step"):
        trainer.fit(FailsOnSecondBatch(recorder), tiny_loaders(n=16, batch_size=4)[0])
    assert recorder.names == [
        *run_start(), "configure_optimizers", "setup_module", "on_fit_start", "process_dataloader",
        "on_train_start", "on_train_epoch_start", *train_batch(),
        *transfer(), "on_train_batch_start", "step",
        "on_exception", "teardown",
    ]
    exc = recorder.kwargs[recorder.names.index("on_exception")]["exception"]
    assert isinstance(exc, RuntimeError) and str(exc) == "boom in training_step"
    assert trainer.state["status"] == "failed"
    # the run's plugins are unregistered again: the module is no longer a plugin of this trainer
    assert not trainer.plugin_manager.is_registered(trainer.module)


# -- order between plugins -----------------------------------------------------------------------------------


class Log:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []


class Named:
    """A Lightning-style callback (plain methods) recording which of its hooks ran."""

    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name, self.identity = log, name, f"callback.{name}"

    def setup(self) -> None:
        self.log.calls.append(("setup", self.name))

    def on_train_start(self) -> None:
        self.log.calls.append(("on_train_start", self.name))

    def on_train_epoch_end(self) -> None:
        self.log.calls.append(("on_train_epoch_end", self.name))

    def teardown(self) -> None:
        self.log.calls.append(("teardown", self.name))


class Monitor:
    """A monitoring callback: runs last in on_train_epoch_end, so it sees what the module logged there."""

    identity = "callback.monitor"

    def __init__(self, log: Log) -> None:
        self.log = log
        self.seen: dict[str, float] = {}

    @ember.hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: ember.Trainer) -> None:
        self.log.calls.append(("on_train_epoch_end", "monitor"))
        self.seen = {k: float(v) for k, v in trainer.callback_metrics.items()}


class LoggingModule(TinyClassifier):
    def __init__(self, log: Log) -> None:
        super().__init__()
        self.calls = log

    def setup(self, stage: str) -> None:
        self.calls.calls.append(("setup", "module"))

    def on_train_start(self) -> None:
        self.calls.calls.append(("on_train_start", "module"))

    def on_train_epoch_end(self) -> None:
        self.calls.calls.append(("on_train_epoch_end", "module"))
        self.log("logged_at_epoch_end", 7.0)

    def teardown(self, stage: str) -> None:
        self.calls.calls.append(("teardown", "module"))


class DataModule:
    def __init__(self, log: Log) -> None:
        self.log = log

    def setup(self, stage: str) -> None:
        self.log.calls.append(("setup", "datamodule"))

    def teardown(self, stage: str) -> None:
        self.log.calls.append(("teardown", "datamodule"))

    def train_dataloader(self) -> Any:
        return tiny_loaders(n=8, batch_size=4)[0]


def test_call_order_between_plugins_callbacks_module_datamodule_and_monitors() -> None:
    log = Log()
    monitor = Monitor(log)
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0,
                            plugins=[Named(log, "p1"), Named(log, "p2")],
                            callbacks=[Named(log, "a"), monitor, Named(log, "b")])
    trainer.fit(LoggingModule(log), datamodule=DataModule(log))

    def order(hook: str) -> list[str]:
        return [who for name, who in log.calls if name == hook]

    # plugins, then callbacks, each in the order given, then the module; the DataModule first for
    # set-up/tear-down (as Lightning); trylast monitors after the module.
    assert order("setup") == ["datamodule", "p1", "p2", "a", "b", "module"]
    assert order("on_train_start") == ["p1", "p2", "a", "b", "module"]
    assert order("on_train_epoch_end") == ["p1", "p2", "a", "b", "module", "monitor"]
    assert order("teardown") == ["datamodule", "p1", "p2", "a", "b", "module"]
    assert monitor.seen["logged_at_epoch_end"] == 7.0


def test_fresh_plugin_manager_per_trainer() -> None:
    log_a, log_b = Log(), Log()
    a = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, callbacks=[Named(log_a, "a")])
    b = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, callbacks=[Named(log_b, "b")])
    assert a.plugin_manager is not b.plugin_manager
    a.fit(TinyClassifier(), tiny_loaders(n=8, batch_size=4)[0])
    assert log_a.calls and not log_b.calls
    calls_a = list(log_a.calls)
    b.fit(TinyClassifier(), tiny_loaders(n=8, batch_size=4)[0])
    assert log_b.calls and log_a.calls == calls_a
    # between runs a manager holds no run plugin (module, roles, callbacks are registered per run)
    assert a.plugin_manager.get_plugins() == set()
