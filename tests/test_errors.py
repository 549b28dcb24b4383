"""Bad input gets an error that says what was wrong, where, and how to fix it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember
from ember.core.errors import SchedulerStateError
from ember.testing import TinyClassifier, tiny_loaders

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def train_loader() -> Any:
    return tiny_loaders(n=8, batch_size=4)[0]


def fit(model: Any = None, **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, **kwargs)
    trainer.fit(model if model is not None else TinyClassifier(), train_loader())
    return trainer


# -- plugin names ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "role", "available", "closest"),
    [
        ({"precision": "bf16-mixd"}, "precision",
         ["16-mixed", "16-true", "32-true", "64-true", "bf16-mixed", "bf16-true"], "bf16-mixed"),
        ({"precision": "32-ture"}, "precision", ["32-true"], "32-true"),
        ({"accelerator": "cdua"}, "accelerator", ["cpu", "cuda", "mps"], "cuda"),
        ({"strategy": "single-device"}, "strategy", ["single_device"], "single_device"),
    ],
)
def test_unknown_plugin_name_lists_the_available_ones_and_the_closest(
        kwargs: dict[str, str], role: str, available: list[str], closest: str) -> None:
    with pytest.raises(ember.UnknownPluginError) as info:
        ember.Trainer(**{**QUIET, **kwargs})
    message = str(info.value)
    (name,) = kwargs.values()
    assert f"unknown {role} {name!r}" in message
    assert f"Available {role} plugins: " in message
    for choice in available:
        assert choice in message
    assert message.endswith(f"Did you mean {closest!r}?")


def test_unknown_name_without_a_close_match_lists_without_guessing() -> None:
    with pytest.raises(ember.UnknownPluginError) as info:
        ember.Trainer(**QUIET, precision="quantum")
    assert "Available precision plugins: 16-mixed, 16-true, 32-true, 64-true, bf16-mixed, bf16-true" in str(info.value)
    assert "Did you mean" not in str(info.value)


def test_unknown_plugin_error_is_a_lookup_error_and_a_plugin_error() -> None:
    with pytest.raises(LookupError):
        ember.Trainer(**dict(QUIET, accelerator="tpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a CUDA device")
def test_cuda_without_a_device_says_so() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"accelerator='cuda'.*no CUDA device.*'cpu' or 'auto'"):
        ember.Trainer(**dict(QUIET, accelerator="cuda"))


def test_several_devices_with_the_single_device_strategy() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"devices=2.*asks for 2 devices.*strategy='ddp'"):
        ember.Trainer(**QUIET, devices=2, strategy="single_device")


# -- plugins with bad hook implementations ----------------------------------------------------------------------


class Misspelled:
    identity = "callback.misspelled"

    @ember.hookimpl
    def on_train_epoch_ned(self, trainer: ember.Trainer) -> None:
        pass


class AsksForMore:
    @ember.hookimpl
    def on_before_optimizer_step(self, trainer: ember.Trainer, optimizer: Any, grad_norm: float) -> None:
        pass


class LightningStyle:
    def on_train_epoch_end(self, trainer: ember.Trainer, pl_module: Any) -> None:
        pass


def test_a_misspelled_hook_in_a_marked_plugin_fails_at_registration() -> None:
    with pytest.raises(ember.PluginError) as info:
        fit(callbacks=[Misspelled()])
    message = str(info.value)
    assert "plugin 'callback.misspelled'" in message
    assert "implements 'on_train_epoch_ned', which is not an ember hook" in message
    assert "Did you mean 'on_train_epoch_end'?" in message


def test_a_misspelled_plain_hook_method_warns() -> None:
    class Module(TinyClassifier):
        def on_validaton_epoch_end(self) -> None:
            pass

    with pytest.warns(ember.EmberWarning, match=r"'on_validaton_epoch_end'.*never be called.*'on_validation_epoch_end'"):
        fit(Module())


def test_an_optional_hook_of_another_package_may_be_unknown() -> None:
    class Optional:
        @ember.hookimpl(optionalhook=True)
        def on_something_ember_does_not_have(self) -> None:
            pass

    fit(plugins=[Optional()])


def test_a_hookimpl_asking_for_an_argument_the_spec_lacks() -> None:
    with pytest.raises(ember.PluginError) as info:
        fit(plugins=[AsksForMore()])
    message = str(info.value)
    assert "plugin 'plugin.AsksForMore'" in message
    assert "on_before_optimizer_step() asks for 'grad_norm'" in message
    assert "it passes trainer, module, optimizer" in message


def test_lightnings_pl_module_argument_gets_a_hint() -> None:
    with pytest.raises(ember.PluginError, match=r"asks for 'pl_module'.*Lightning's 'pl_module' is called 'module'"):
        fit(callbacks=[LightningStyle()])


def test_a_failed_registration_leaves_no_plugin_behind() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1, callbacks=[AsksForMore()])
    with pytest.raises(ember.PluginError):
        trainer.fit(TinyClassifier(), train_loader())
    assert trainer.plugin_manager.get_plugins() == set()


def test_a_module_role_hook_with_a_bad_argument_names_the_module_class() -> None:
    class BadStep(TinyClassifier):
        @ember.hookimpl
        def step(self, trainer: ember.Trainer, inputs: Any) -> Any:
            return None

    with pytest.raises(ember.PluginError, match=r"plugin 'module' \(BadStep\).*step\(\) asks for 'inputs'"):
        fit(BadStep())


# -- the model ---------------------------------------------------------------------------------------------------


def test_a_module_without_training_step() -> None:
    class NoStep(torch.nn.Module):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(ember.ConfigurationError,
                       match=r"NoStep has no training_step\(\) method, which trainer.fit\(\) needs\. "
                             r"Define training_step\(self, batch, batch_idx\)"):
        fit(NoStep())


@pytest.mark.parametrize(("method", "step"), [("validate", "validation_step"), ("test", "test_step"),
                                              ("predict", "predict_step")])
def test_a_module_without_the_step_of_an_evaluation(method: str, step: str) -> None:
    class OnlyTraining(torch.nn.Module):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

    with pytest.raises(ember.ConfigurationError, match=rf"OnlyTraining has no {step}\(\) method.*trainer.{method}\(\)"):
        getattr(ember.Trainer(**QUIET), method)(OnlyTraining(), train_loader())


def test_a_module_without_configure_optimizers() -> None:
    class NoOptim(torch.nn.Module):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

    with pytest.raises(ember.ConfigurationError, match=r"NoOptim has no configure_optimizers\(\).*AdamW"):
        fit(NoOptim())


def test_not_a_module() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"trainer.fit\(model=...\) expects a torch.nn.Module.*got dict"):
        ember.Trainer(**QUIET).fit({"training_step": None}, train_loader())  # type: ignore[arg-type]


def test_training_step_returning_something_unusable() -> None:
    class ReturnsString(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return "loss"

    with pytest.raises(ember.ConfigurationError, match=r"training_step returned str; return the loss tensor"):
        fit(ReturnsString())


def test_training_step_returning_none_skips_the_backward_but_still_counts_the_step() -> None:
    """As in Lightning (tests/lightning/loop.json): zero_grad and the optimizer step keep their schedule; the step
    finds no gradients and leaves the weights as they are."""
    class Skips(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None if batch_idx == 0 else super().training_step(batch, batch_idx)

    assert fit(Skips()).global_step == 2


def sgd(module: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(module.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda m: "adam", r"returned 'adam' \(str\)\. configure_optimizers\(\) must return one of: an optimizer"),
        (lambda m: 5, r"returned 5 \(int\)"),
        (lambda m: [sgd(m), "x"], r"returned a list of \[SGD, 'x' \(str\)\]"),
        (lambda m: {"optim": sgd(m)}, r"returned a dict with keys \['optim'\]\. Did you mean 'optimizer'\?"),
        (lambda m: {"optimizer": "sgd"}, r"returned a dict with keys \['optimizer'\]"),
        (lambda m: {"optimizer": sgd(m), "lr_scheduler": "cosine"},
         r"'cosine' is not a learning-rate scheduler \(it has no step\(\)\)"),
        (lambda m: ([sgd(m)], [object()]), r"is not a learning-rate scheduler"),
    ],
)
def test_configure_optimizers_returning_something_unusable(make: Any, expected: str) -> None:
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            return make(self)

    with pytest.raises(ember.ConfigurationError, match=expected):
        fit(Model())


@pytest.mark.parametrize(
    ("sched", "expected"),
    [
        ({"interval": "batch"}, r"lr_scheduler 'interval'='batch' is invalid: expected 'epoch' or 'step'"),
        ({"frequency": 0}, r"lr_scheduler 'frequency'=0 is invalid: expected an integer >= 1"),
    ],
)
def test_bad_lr_scheduler_config(sched: dict[str, Any], expected: str) -> None:
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = sgd(self)
            return {"optimizer": opt,
                    "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1), **sched}}

    with pytest.raises(ember.ConfigurationError, match=expected):
        fit(Model())


class _CustomScheduler:
    """A scheduler of the module's own: ``step`` takes an argument the loop has no value for."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.steps = optimizer, []

    def step(self, foobar: Any) -> None:
        self.steps.append(foobar)

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.steps = state["steps"]


class _NoState(_CustomScheduler):
    state_dict = None  # type: ignore[assignment]

    def step(self) -> None:  # type: ignore[override]
        self.steps.append(None)


def _with_scheduler(make: Any, steps_itself: bool = False) -> Any:
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = sgd(self)
            return {"optimizer": opt, "lr_scheduler": make(opt)}

    class SteppingModel(Model):
        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            scheduler.step(self.current_epoch)

    return SteppingModel() if steps_itself else Model()


def test_a_scheduler_checkpoints_cannot_save_is_refused_before_training() -> None:
    model = _with_scheduler(_NoState)
    with pytest.raises(SchedulerStateError, match=r"lr scheduler `_NoState` is invalid: it has no state_dict"):
        fit(model)
    assert model.net[0].weight.grad is None  # refused before the first batch
    with pytest.raises(TypeError):  # as Lightning's TypeError
        fit(_with_scheduler(_NoState))


def test_a_scheduler_whose_step_the_loop_cannot_call_needs_lr_scheduler_step() -> None:
    with pytest.raises(ember.ConfigurationError,
                       match=r"`_CustomScheduler` doesn't follow PyTorch's LRScheduler API: its step\(foobar\)"):
        fit(_with_scheduler(_CustomScheduler))
    trainer = ember.Trainer(**QUIET, max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(_with_scheduler(_CustomScheduler, steps_itself=True), train_loader())
    assert trainer.lr_scheduler_configs[0].scheduler.steps == [0, 1]  # the module's lr_scheduler_step stepped it


def test_a_tuple_of_optimizers_and_one_scheduler() -> None:
    """``([optimizer], scheduler)``: the second item may be one scheduler rather than a list (as in Lightning)."""
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            opt = sgd(self)
            return [opt], torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)

    trainer = fit(Model())
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_count_argument_given_a_string_says_what_it_should_be() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(reload_dataloaders_every_n_epochs='test'\) is "
                       r"invalid: .*should be an integer, found 'test': it should be an int >= 0"):
        ember.Trainer(**QUIET, reload_dataloaders_every_n_epochs="test")


def test_no_optimizer_warns_and_trains_nothing() -> None:
    class NoOpt(TinyClassifier):
        def configure_optimizers(self) -> None:
            return None

    with pytest.warns(UserWarning, match="returned no optimizer"):
        trainer = fit(NoOpt())
    assert trainer.global_step == 0


class ManualModel(TinyClassifier):
    automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        opt.step()


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"gradient_clip_val": 1.0}, r"gradient_clip_val=1.0.*manual optimization.*self.clip_gradients"),
    ({"accumulate_grad_batches": 2}, r"accumulate_grad_batches=2.*manual optimization"),
])
def test_automatic_only_arguments_with_manual_optimization(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ember.ConfigurationError, match=expected):
        fit(ManualModel(), **kwargs)


# -- Trainer arguments -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "allowed"),
    [
        ({"max_epochs": -2}, "expected an integer >= -1 or None"),
        ({"max_epochs": "3"}, "expected an integer >= -1 or None"),
        ({"max_epochs": 2.5}, "expected an integer >= -1 or None"),
        ({"min_epochs": -1}, "expected an integer >= 0 or None"),
        ({"max_steps": -5}, "expected an integer >= -1"),
        ({"min_steps": True}, "expected an integer >= 0 or None"),
        ({"limit_train_batches": 1.5}, "expected an int >= 0 (batches) or a float in [0.0, 1.0] (fraction)"),
        ({"limit_val_batches": -1}, "expected an int >= 0 (batches) or a float in [0.0, 1.0] (fraction)"),
        ({"limit_test_batches": "all"}, "expected an int >= 0 (batches) or a float in [0.0, 1.0] (fraction)"),
        ({"limit_predict_batches": True}, "expected an int >= 0 (batches) or a float in [0.0, 1.0] (fraction)"),
        ({"val_check_interval": 0}, "expected a float in (0.0, 1.0] (fraction of an epoch) or an int > 0"),
        ({"val_check_interval": 1.5}, "expected a float in (0.0, 1.0] (fraction of an epoch) or an int > 0"),
        ({"check_val_every_n_epoch": 0}, "expected an integer >= 1 or None"),
        ({"check_val_every_n_epoch": None}, "None is only allowed with an int val_check_interval"),
        ({"check_val_every_n_epoch": None, "val_check_interval": 0.5},
         "None is only allowed with an int val_check_interval"),
        ({"num_sanity_val_steps": -2}, "expected an integer >= -1"),
        ({"fast_dev_run": -1}, "expected a bool or an int >= 0 (number of batches)"),
        ({"fast_dev_run": 0.5}, "expected a bool or an int >= 0 (number of batches)"),
        ({"accumulate_grad_batches": 0}, "expected an integer >= 1"),
        ({"gradient_clip_val": -1.0}, "expected a finite number >= 0"),
        ({"gradient_clip_val": "1"}, "expected a finite number >= 0"),
        ({"gradient_clip_algorithm": "nrom"}, "expected 'norm' or 'value' Did you mean 'norm'?"),
        ({"deterministic": "yes"}, "expected True, False, 'warn' or None"),
        ({"num_nodes": 0}, "expected an integer >= 1"),
        ({"log_every_n_steps": 0}, "expected an integer >= 1"),
        ({"block_plugins": [1]}, "expected a list of plugin identities (strings such as"),
        ({"precision": 3.5}, "expected the name of an installed precision plugin (a string such as '32-true' or "
                             "'bf16-mixed') or a precision plugin object"),
        ({"accelerator": 1}, "expected the name of an installed accelerator plugin"),
        ({"strategy": True}, "expected the name of an installed strategy plugin"),
    ],
)
def test_invalid_trainer_values_name_argument_value_and_what_is_allowed(kwargs: dict[str, Any], allowed: str) -> None:
    with pytest.raises(ember.ConfigurationError) as info:
        ember.Trainer(**{**QUIET, **kwargs})
    message = str(info.value)
    assert allowed in message
    name, value = next((k, v) for k, v in kwargs.items() if k != "val_check_interval" or len(kwargs) == 1)
    shown = f"[..., {value[0]!r}, ...]" if isinstance(value, list) else repr(value)
    assert f"Trainer({name}={shown}) is invalid" in message


def test_a_class_instead_of_an_instance() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"callbacks=\[..., Misspelled, ...\]\) holds a class: pass an "
                                                       r"instance, Misspelled\(\)"):
        ember.Trainer(**QUIET, callbacks=[Misspelled])
    from ember.core.hooks.defaults import Defaults

    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(precision=Defaults\) is invalid: that is a class"):
        ember.Trainer(**QUIET, precision=Defaults)


@pytest.mark.parametrize("item", [None, 3, 0.5, True])
def test_something_that_is_neither_a_plugin_name_nor_a_plugin_object(item: Any) -> None:
    with pytest.raises(ember.ConfigurationError, match=rf"callbacks=\[..., {item!r}, ...\]\) is invalid: expected "
                                                       r"plugin names .* or plugin objects"):
        ember.Trainer(**QUIET, callbacks=[item])


def test_a_plugin_of_another_role() -> None:
    class Precision:
        role = "precision"

    with pytest.raises(ember.ConfigurationError, match=r"that plugin's role is 'precision', not 'accelerator'"):
        ember.Trainer(**dict(QUIET, accelerator=Precision()))


def test_two_plugins_of_one_role_or_a_conflicting_name() -> None:
    class Precision:
        role = "precision"
        identity = "precision.mine"

    with pytest.raises(ember.ConfigurationError, match=r"holds two precision plugins"):
        ember.Trainer(**QUIET, plugins=[Precision(), Precision()])
    with pytest.raises(ember.ConfigurationError, match=r"precision='bf16-mixed'.*conflicts with the precision plugin"):
        ember.Trainer(**QUIET, precision="bf16-mixed", plugins=[Precision()])
    assert ember.Trainer(**QUIET, plugins=[Precision()]).role_identities["precision"] == "precision.mine"


def test_none_means_the_default_as_in_lightning() -> None:
    trainer = ember.Trainer(**dict(QUIET, accelerator=None), precision=None, strategy=None, environment=None,
                            callbacks=None, plugins=None, checkpoint_io=None)
    auto = "accelerator.cuda" if torch.cuda.is_available() else "accelerator.cpu"  # None is "auto"
    assert trainer.role_identities == {"accelerator": auto, "strategy": "strategy.single_device",
                                       "precision": "precision.32-true", "environment": "environment.local",
                                       "checkpoint_io": "checkpoint_io.torch"}


@pytest.mark.parametrize(("given", "closest"), [("max_epoch", "max_epochs"), ("gpus", None),
                                                ("limit_train_batch", "limit_train_batches"),
                                                ("gradient_clipping", None), ("precission", "precision")])
def test_unknown_trainer_arguments(given: str, closest: str | None) -> None:
    with pytest.raises(ember.ConfigurationError) as info:
        ember.Trainer(**{**QUIET, given: 1})
    message = str(info.value)
    assert f"Trainer.__init__() got an unexpected keyword argument {given!r}." in message
    assert "Valid arguments: accelerator, strategy, devices" in message
    if closest:
        assert f"Did you mean {closest!r}?" in message


# -- exceptions during a run -------------------------------------------------------------------------------------


class Boom(TinyClassifier):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise ValueError("bad batch")


def test_every_on_exception_runs_even_when_one_raises(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    class Raises:
        def on_exception(self, exception: BaseException) -> None:
            seen.append("raises")
            raise RuntimeError("handler broke")

    class Records:
        def on_exception(self, trainer: ember.Trainer, exception: BaseException) -> None:
            seen.append(f"records {type(exception).__name__}")

    class Wraps:
        @ember.hookimpl(wrapper=True)
        def on_exception(self) -> Any:
            seen.append("wrapper before")
            yield
            seen.append("wrapper after")

    with caplog.at_level(logging.ERROR, logger="ember"), pytest.raises(ValueError, match="bad batch"):
        fit(Boom(), callbacks=[Raises(), Records(), Wraps()])
    assert seen == ["wrapper before", "raises", "records ValueError", "wrapper after"]
    assert "handler broke" in caplog.text


def test_keyboard_interrupt_runs_on_exception_then_propagates() -> None:
    calls: list[str] = []

    class Interrupts(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

        def on_exception(self, exception: BaseException) -> None:
            calls.append(type(exception).__name__)

        def teardown(self, stage: str) -> None:
            calls.append(f"teardown {stage}")

    trainer = ember.Trainer(**QUIET, max_epochs=3, num_sanity_val_steps=0)
    with pytest.raises(KeyboardInterrupt):  # one meaning of Ctrl-C: the script stops (design.md section 5)
        trainer.fit(Interrupts(), train_loader())
    assert calls == ["KeyboardInterrupt"]  # no module teardown after an exception, as in Lightning
    assert trainer.interrupted and trainer.state["status"] == "interrupted"
    assert trainer.global_step == 1 and trainer.current_epoch == 0


def test_gpu_is_lightnings_spelling_of_cuda() -> None:
    from ember.core.hooks.config import make_config

    assert make_config({"accelerator": "gpu"}).accelerator == "cuda"
