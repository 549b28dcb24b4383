"""Features own their Trainer arguments: plugins declare them in ``add_options``; the Trainer's checking, the
CLI's help and the docs' argument rows come from those declarations; core keeps no list of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import ember
from ember.core.hooks.discovery import canonical, discover
from ember.core.hooks.options import declarations, declared_options, markdown_row

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}

PLUGIN = '''
import ember
from ember.core.hooks.options import invalid


def _decay(value):
    if not isinstance(value, float) or not 0.0 < value < 1.0:
        raise invalid("probe_decay", value, "expected a float in (0, 1)")


class Ema:
    identity = "callback.decay-probe"
    started = []

    @staticmethod
    @ember.hookimpl
    def add_options(options):
        options.add("probe_decay", type="float | None", default=None, validate=_decay, switches="callback.decay-probe",
                    help="keep an exponential moving average of the weights with this decay")

    @ember.hookimpl
    def on_train_start(self, trainer):
        Ema.started.append(trainer.config.probe_decay)
'''


def test_declared_options_list_core_and_plugin_arguments_with_their_owner() -> None:
    options = {o.name: o for o in declared_options()}
    assert options["max_epochs"].plugin == "core" and options["max_epochs"].default is None
    assert "epochs" in options["max_epochs"].help
    owners = {name: options[name].plugin for name in
              ("enable_progress_bar", "enable_model_summary", "enable_checkpointing", "max_time", "hang_timeout")}
    assert owners == {"enable_progress_bar": "progress.tqdm", "enable_model_summary": "callback.model-summary",
                      "enable_checkpointing": "callback.model-checkpoint", "max_time": "callback.timer",
                      "hang_timeout": "callback.hang-watchdog"}
    assert options["max_time"].default is None and options["hang_timeout"].default == 600.0
    assert declarations().defaults == {"logger": "logger.tensorboard"}  # tensorboard is a test dependency
    assert len(options) == len(declared_options())  # one declaration per name


def test_plugin_arguments_are_checked_by_their_declaration_and_read_from_the_config() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(enable_progress_bar='yes'\) is invalid: expected "
                                                       r"True or False"):
        ember.Trainer(enable_progress_bar="yes")
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(max_time='soon'\) is invalid"):
        ember.Trainer(max_time="soon")
    trainer = ember.Trainer(max_time={"hours": 2}, **QUIET)
    assert trainer.config.max_time == {"hours": 2} and trainer.config.enable_checkpointing is True
    assert "callback.timer" in dict(trainer.extra_plugins)
    assert "callback.timer" not in dict(ember.Trainer(**QUIET).extra_plugins)  # None leaves it off
    with pytest.raises(AttributeError, match="no argument 'max_tme'"):
        trainer.config.max_tme  # noqa: B018


@pytest.mark.parametrize(("given", "closest"), [("max_tme", "max_time"), ("enable_progressbar", "enable_progress_bar"),
                                                ("hang_timout", "hang_timeout")])
def test_unknown_arguments_suggest_plugin_arguments_too(given: str, closest: str) -> None:
    with pytest.raises(ember.ConfigurationError, match=rf"unexpected keyword argument {given!r}\. Did you mean {closest!r}\?"):
        ember.Trainer(**{given: 1})


def test_an_installed_plugin_brings_its_own_argument(ember_distribution: Any) -> None:
    with pytest.raises(ember.ConfigurationError, match="unexpected keyword argument 'probe_decay'"):
        ember.Trainer(probe_decay=0.9)
    ember_distribution("ember-decay-probe", entry_points={"ember.plugins": {"callback.decay-probe": "probe_plugin:Ema"}},
                       modules={"probe_plugin.py": PLUGIN})
    assert any(o.name == "probe_decay" and o.plugin == "callback.decay-probe" for o in declared_options())
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(probe_decay=2\.0\) is invalid: expected a float"):
        ember.Trainer(probe_decay=2.0)
    assert "callback.decay-probe" not in dict(ember.Trainer(**QUIET).extra_plugins)  # default None: off

    from ember.testing import TinyClassifier, tiny_loaders

    trainer = ember.Trainer(probe_decay=0.9, max_epochs=1, limit_train_batches=1, enable_checkpointing=False,
                            num_sanity_val_steps=0, **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders(n=8)[0])
    import probe_plugin

    assert probe_plugin.Ema.started == [0.9]  # switched on by its argument, and reading it


def test_two_plugins_declaring_one_argument_is_an_error(ember_distribution: Any) -> None:
    clash = PLUGIN.replace('"callback.decay-probe"', '"callback.timer-two"').replace("probe_decay", "max_time")
    ember_distribution("ember-clash", entry_points={"ember.plugins": {"callback.timer-two": "clash_plugin:Ema"}},
                       modules={"clash_plugin.py": clash})
    with pytest.raises(ember.PluginError, match="'callback.timer-two' declares the Trainer argument 'max_time', "
                                                "which 'callback.timer' declares already"):
        ember.Trainer()


def test_core_keeps_no_list_of_plugin_arguments_or_default_plugins() -> None:
    identities = [o.plugin for o in declarations().of_plugins()] + list(declarations().defaults.values())
    names = [o.name for o in declarations().of_plugins()]
    for path in sorted((ROOT / "ember" / "core").rglob("*.py")):
        text = path.read_text()
        for identity in identities:
            assert f'"{identity}"' not in text, f"{path.name} names the plugin {identity!r}"
        for name in names:
            assert not re.search(rf'^\s*{name}\s*[:=]', text, re.M), f"{path.name} declares {name!r}"


def _ember_own(options: list) -> list:
    """The options of ember's own plugins (another installed package may declare more: the suite passes with
    third-party plugins installed)."""
    found = discover()
    infos = {identity: entries for group in (found.plugins, found.autoload) for identity, entries in group.items()}
    return [o for o in options if any(canonical(i.dist_name or "") == "ember" for i in infos.get(o.plugin, ()))]


def test_the_docs_argument_rows_come_from_the_declarations() -> None:
    page = (ROOT / "docs" / "trainer.md").read_text()
    for option in _ember_own(declarations().of_plugins()):
        assert markdown_row(option) in page, (
            f"docs/trainer.md's row for {option.name!r} is stale: run `python -m ember.core.hooks.options` and paste it")


def test_a_config_built_directly_has_the_declared_defaults() -> None:
    config = ember.TrainerConfig(max_epochs=3)
    assert (config.max_epochs, config.max_time, config.enable_progress_bar, config.hang_timeout) == (3, None, True, 600.0)
