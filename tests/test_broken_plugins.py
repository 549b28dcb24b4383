"""A broken third-party plugin never makes the user guess: identity, distribution and version, what failed, and
how to switch it off. Always-on plugins warn (or fail under strict mode); selected plugins always fail."""

from __future__ import annotations

import re
import warnings

import pytest

import ember
from ember.core.hooks.discovery import discover

GOOD = '''
import ember

class Good:
    @ember.hookimpl
    def on_train_start(self, trainer):
        trainer.__dict__["good_ran"] = True
'''

BAD_ARGUMENT = '''
import ember

class BadArgument:
    @ember.hookimpl
    def on_train_start(self, trainer, not_an_argument):
        pass
'''

UNKNOWN_HOOK = '''
import ember

class UnknownHook:
    @ember.hookimpl
    def on_train_strat(self, trainer):
        pass
'''

RAISES = '''
import ember

class Raises:
    @ember.hookimpl
    def on_train_batch_end(self, batch_idx):
        if batch_idx == 1:
            raise KeyError("missing key in the plugin")
'''


def _autoloaded(trainer: ember.Trainer, *identities: str) -> list[str]:
    """The always-on plugins of this test's fake distributions that a Trainer loaded (any other installed package's
    always-on plugins are left out: the suite passes with third-party plugins installed)."""
    return [identity for identity, _ in trainer.autoload_plugins if identity in identities]


def _strict_args(how: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    if how == "environment":
        monkeypatch.setenv("EMBER_STRICT_PLUGINS", "1")
        return {}
    return {"strict_plugins": True}


@pytest.fixture
def import_error_dist(ember_distribution):
    ember_distribution("broken-dist", "2.3.1", entry_points={"ember.autoload": {"callback.broken": "no_such_module:X"}})
    ember_distribution("good-dist", entry_points={"ember.autoload": {"callback.good": "good_plugin:Good"}},
                       modules={"good_plugin.py": GOOD})


def test_import_error_warns_with_identity_distribution_cause_and_switch(import_error_dist, ember_run) -> None:
    with pytest.warns(ember.EmberWarning) as caught:
        result = ember_run(limit_train_batches=1)
    (message,) = [str(w.message) for w in caught if "callback.broken" in str(w.message)]
    assert "'callback.broken'" in message and "broken-dist 2.3.1" in message
    assert "ModuleNotFoundError" in message and "no_such_module" in message
    assert "EMBER_BLOCK_PLUGINS=callback.broken" in message and "block_plugins=['callback.broken']" in message
    assert "strict_plugins=True" in message and "EMBER_STRICT_PLUGINS=1" in message
    # The run goes on without it; the healthy always-on plugin runs.
    assert result.trainer.good_ran is True
    assert _autoloaded(result.trainer, "callback.good", "callback.broken") == ["callback.good"]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_strict_mode_makes_it_an_error(import_error_dist, monkeypatch, how) -> None:
    with pytest.raises(ember.PluginError, match=r"'callback.broken' \(from broken-dist 2.3.1.*failed to load"):
        ember.Trainer(accelerator="cpu", **_strict_args(how, monkeypatch))


def test_strict_false_overrides_the_environment(import_error_dist, monkeypatch) -> None:
    monkeypatch.setenv("EMBER_STRICT_PLUGINS", "1")
    with pytest.warns(ember.EmberWarning, match="callback.broken"):
        ember.Trainer(accelerator="cpu", strict_plugins=False)


@pytest.mark.parametrize("how", ["argument", "environment", "autoload off"])
def test_switched_off_broken_plugin_is_silent(import_error_dist, monkeypatch, how) -> None:
    kwargs: dict = {"strict_plugins": True}
    if how == "argument":
        kwargs["block_plugins"] = ["callback.broken"]
    elif how == "environment":
        monkeypatch.setenv("EMBER_BLOCK_PLUGINS", "callback.broken")
    else:
        kwargs["autoload_plugins"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = ember.Trainer(accelerator="cpu", **kwargs)
    expected = [] if how == "autoload off" else ["callback.good"]
    assert _autoloaded(trainer, "callback.good", "callback.broken") == expected


def test_invalid_hook_argument_is_caught_when_the_trainer_is_made(ember_distribution) -> None:
    ember_distribution("bad-arg-dist", "0.4", entry_points={"ember.autoload": {"callback.bad-arg": "bad_arg:BadArgument"}},
                       modules={"bad_arg.py": BAD_ARGUMENT})
    with pytest.warns(ember.EmberWarning) as caught:
        trainer = ember.Trainer(accelerator="cpu")
    (message,) = [str(w.message) for w in caught if "callback.bad-arg" in str(w.message)]
    assert "plugin 'callback.bad-arg' (from bad-arg-dist 0.4) has an invalid hook implementation" in message
    assert "not_an_argument" in message and "EMBER_BLOCK_PLUGINS=callback.bad-arg" in message
    assert "uninstall bad-arg-dist" in message
    assert _autoloaded(trainer, "callback.bad-arg") == []
    with pytest.raises(ember.PluginError, match="invalid hook implementation"):
        ember.Trainer(accelerator="cpu", strict_plugins=True)


def test_misspelled_hook_name_suggests_the_right_one(ember_distribution) -> None:
    ember_distribution("typo-dist", entry_points={"ember.autoload": {"callback.typo": "typo_plugin:UnknownHook"}},
                       modules={"typo_plugin.py": UNKNOWN_HOOK})
    with pytest.raises(ember.PluginError) as info:
        ember.Trainer(accelerator="cpu", strict_plugins=True)
    message = str(info.value)
    assert "'callback.typo' (from typo-dist 1.0) implements 'on_train_strat', which is not an ember hook" in message
    assert "Did you mean 'on_train_start'?" in message and "EMBER_BLOCK_PLUGINS=callback.typo" in message


def test_conflicting_identity_names_every_distribution(ember_distribution) -> None:
    ember_distribution("first-dist", "1.1", entry_points={"ember.autoload": {"callback.twice": "good_plugin:Good"}},
                       modules={"good_plugin.py": GOOD})
    ember_distribution("second-dist", "2.2", entry_points={"ember.autoload": {"callback.twice": "good_plugin:Good"}})
    with pytest.warns(ember.EmberWarning) as caught:
        ember.Trainer(accelerator="cpu")
    (message,) = [str(w.message) for w in caught if "callback.twice" in str(w.message)]
    assert "'callback.twice' is claimed by several distributions" in message
    assert message.index("first-dist 1.1") < message.index("second-dist 2.2")  # sorted, not install order
    assert "EMBER_BLOCK_PLUGINS=dist:second-dist" in message  # keeps one of them (blocking the identity would not)
    with pytest.raises(ember.PluginConflictError):
        ember.Trainer(accelerator="cpu", strict_plugins=True)


def test_conflicting_selectable_plugin_is_an_error_when_selected(ember_distribution) -> None:
    for dist in ("one-dist", "two-dist"):
        ember_distribution(dist, entry_points={"ember.plugins": {"precision.dup": "ember.plugins.precision.fp32_true:FP32True"}})
    ember.Trainer(accelerator="cpu")  # not selected: no complaint
    with pytest.raises(ember.PluginConflictError, match=r"one-dist 1.0 .*two-dist 1.0"):
        ember.Trainer(accelerator="cpu", precision="dup")


def test_invalid_identity_in_the_autoload_group(ember_distribution) -> None:
    ember_distribution("shouty-dist", entry_points={"ember.autoload": {"NoRole": "good_plugin:Good"}},
                       modules={"good_plugin.py": GOOD})
    with pytest.warns(ember.EmberWarning, match=r"invalid plugin identity 'NoRole'.*shouty-dist 1.0"):
        ember.Trainer(accelerator="cpu")
    with pytest.raises(ember.PluginError, match="invalid plugin identity 'NoRole'"):
        ember.Trainer(accelerator="cpu", strict_plugins=True)
    assert any("NoRole" in message for message in discover().invalid)


def test_a_selected_plugin_that_fails_to_load_is_always_an_error(ember_distribution) -> None:
    ember_distribution("fast-dist", "0.9", entry_points={"ember.plugins": {"precision.fast": "missing_fast:Fast"}})
    with pytest.raises(ember.PluginError) as info:
        ember.Trainer(accelerator="cpu", precision="fast", strict_plugins=False)
    message = str(info.value)
    assert "'precision.fast' (from fast-dist 0.9" in message and "ModuleNotFoundError" in message
    assert "EMBER_BLOCK_PLUGINS=precision.fast" in message


def test_an_exception_inside_an_installed_plugin_names_it(ember_distribution, ember_run) -> None:
    ember_distribution("raising-dist", "3.0", entry_points={"ember.autoload": {"callback.raises": "raising:Raises"}},
                       modules={"raising.py": RAISES})
    with pytest.raises(KeyError, match="missing key in the plugin") as info:
        ember_run(limit_train_batches=3)
    notes = getattr(info.value, "__notes__", [])
    assert notes == ["Raised inside the plugin 'callback.raises' from raising-dist 3.0. Switch it off with "
                     "EMBER_BLOCK_PLUGINS=callback.raises or Trainer(block_plugins=['callback.raises']), or "
                     "uninstall raising-dist."]


def test_an_error_in_the_users_own_code_gets_no_plugin_note(ember_run) -> None:
    from ember.testing import TinyClassifier

    class Model(TinyClassifier):
        def training_step(self, batch, batch_idx):
            raise ValueError("user bug")

    with pytest.raises(ValueError, match="user bug") as info:
        ember_run(model=Model())
    assert not getattr(info.value, "__notes__", [])


def test_plugins_selected_by_identity_string(ember_distribution, ember_run) -> None:
    ember_distribution("sel-dist", entry_points={"ember.plugins": {"callback.good": "good_plugin:Good"}},
                       modules={"good_plugin.py": GOOD})
    assert ember_run(plugins=["callback.good"], limit_train_batches=1).trainer.good_ran is True
    assert "good_ran" not in vars(ember_run(limit_train_batches=1).trainer)  # selectable: off unless named
    with pytest.raises(ember.UnknownPluginError, match=re.escape("Did you mean 'good'?")):
        ember.Trainer(accelerator="cpu", plugins=["callback.godo"])
    with pytest.raises(ember.PluginError, match="blocked by block_plugins"):
        ember.Trainer(accelerator="cpu", plugins=["callback.good"], block_plugins=["callback.good"])
    trainer = ember.Trainer(accelerator="cpu", plugins=["precision.bf16-mixed"])
    assert trainer.role_identities["precision"] == "precision.bf16-mixed"
    with pytest.raises(ember.ConfigurationError, match="conflicts"):
        ember.Trainer(accelerator="cpu", plugins=["precision.bf16-mixed"], precision="64-true")
