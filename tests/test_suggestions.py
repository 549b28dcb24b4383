"""Every misspelled name gets the closest valid one: Trainer arguments, plugin names and roles, block lists, hook
names; and an object passed as a callback or plugin that implements no hook is an error naming it."""

from __future__ import annotations

from typing import Any

import pytest

import ember
from ember.core.errors import closest, suggest
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def test_one_helper_makes_every_suggestion() -> None:
    assert closest("max_epoch", ["max_epochs", "max_steps"]) == "max_epochs"
    assert closest("gpus", ["max_epochs", "max_steps"]) is None
    assert suggest("nrom", ["norm", "value"]) == " Did you mean 'norm'?"
    assert suggest("quantum", ["norm", "value"]) == ""


@pytest.mark.parametrize(("given", "expected"), [
    ("max_epoch", "max_epochs"),
    ("enable_progres_bar", "enable_progress_bar"),  # declared by a plugin, not by core
    ("detect_nonfinite_los", "detect_nonfinite_loss"),
])
def test_an_unknown_trainer_argument_is_a_type_error_with_the_closest_one(given: str, expected: str) -> None:
    with pytest.raises(TypeError) as info:
        ember.Trainer(**QUIET, **{given: 1})
    assert isinstance(info.value, ember.UnknownArgumentError) and isinstance(info.value, ember.ConfigurationError)
    assert f"unexpected keyword argument {given!r}. Did you mean {expected!r}?" in str(info.value)


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"callbacks": ["early-stoping"]}, "Did you mean 'early-stopping'?"),
    ({"callbacks": ["callback.lr-monitr"]}, "Did you mean 'lr-monitor'?"),
    ({"profiler": "simpel"}, "Did you mean 'simple'?"),
    ({"logger": "tensorbord"}, "Did you mean 'tensorboard'?"),
    ({"plugins": ["precison.bf16-mixed"]}, "'precison' is not a plugin role"),
    ({"plugins": ["precison.bf16-mixed"]}, "Did you mean 'precision.bf16-mixed'?"),
    ({"callbacks": ["calback.early-stopping"]}, "Did you mean 'callback.early-stopping'?"),
])
def test_a_misspelled_plugin_name_or_role(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ember.UnknownPluginError) as info:
        ember.Trainer(**{**QUIET, **kwargs})
    assert expected in str(info.value)


def test_a_misspelled_block_list_entry_warns_with_the_closest_identity() -> None:
    with pytest.warns(ember.EmberWarning, match=r"'callback.early-stoping' names no installed plugin.*"
                                                r"Did you mean 'callback.early-stopping'\?"):
        ember.Trainer(**QUIET, block_plugins=["callback.early-stoping"])


class NoHooks:
    def __repr__(self) -> str:
        return "NoHooks()"


class OnlyATypo:
    def on_train_epoch_ned(self, trainer: Any) -> None:
        pass


@pytest.mark.parametrize("argument", ["callbacks", "plugins"])
def test_an_object_that_implements_no_hook_is_an_error_naming_it(argument: str) -> None:
    with pytest.raises(ember.ConfigurationError) as info:
        ember.Trainer(**QUIET, **{argument: [NoHooks()]})
    message = str(info.value)
    assert message.startswith(f"Trainer({argument}=[..., NoHooks(), ...]) is invalid: NoHooks implements no ember hook")
    assert "Did you mean" not in message


def test_an_object_whose_only_hook_is_misspelled_gets_the_suggestion() -> None:
    with pytest.raises(ember.ConfigurationError) as info:
        ember.Trainer(**QUIET, callbacks=[OnlyATypo()])
    message = str(info.value)
    assert "OnlyATypo implements no ember hook" in message
    assert "Its method 'on_train_epoch_ned' is not a hook. Did you mean 'on_train_epoch_end'?" in message


def test_objects_with_hooks_are_accepted_plain_or_marked() -> None:
    class Plain:
        def on_fit_start(self) -> None:
            pass

    class Marked:
        @ember.hookimpl
        def on_before_zero_grad(self) -> None:
            pass

    trainer = ember.Trainer(**QUIET, callbacks=[Plain()], plugins=[Marked()])
    assert [type(p).__name__ for _, p in trainer.extra_plugins][:2] == ["Marked", "Plain"]


def test_a_callback_method_named_almost_like_a_hook_warns_with_the_hook() -> None:
    class Callback:
        def on_train_epoch_end(self) -> None:
            pass

        def on_validaton_end(self) -> None:
            pass

    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, callbacks=[Callback()])
    with pytest.warns(ember.EmberWarning, match=r"'on_validaton_end'.*never be called\. Did you mean "
                                                r"'on_validation_end'\?"):
        trainer.fit(TinyClassifier(), tiny_loaders(n=8, batch_size=4)[0])


def test_a_marked_method_with_a_misspelled_hook_name_fails_with_the_hook() -> None:
    class Marked:
        @ember.hookimpl
        def on_train_epoch_ned(self) -> None:
            pass

    trainer = ember.Trainer(**QUIET, max_epochs=1, callbacks=[Marked()])
    with pytest.raises(ember.PluginError, match=r"implements 'on_train_epoch_ned', which is not an ember hook\. "
                                                r"Did you mean 'on_train_epoch_end'\?"):
        trainer.fit(TinyClassifier(), tiny_loaders(n=8, batch_size=4)[0])


def test_a_misspelled_role_gets_the_closest_role() -> None:
    from ember.core.hooks.discovery import discover

    assert discover().check_role("precision") == "precision"
    with pytest.raises(ember.UnknownPluginError) as info:
        discover().check_role("precison")
    message = str(info.value)
    assert message.startswith("unknown plugin role 'precison': the installed plugins' roles are accelerator, ")
    assert message.endswith("Did you mean 'precision'?")
