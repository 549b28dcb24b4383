"""A broken or hostile plugin cannot take the process down: SystemExit at import or construction becomes an
error naming the distribution and the entry point; `ember plugins` lists the rest and marks it; an identity
claimed twice names both distributions and offers a fix (blocking one distribution) that works."""

from __future__ import annotations

import warnings

import pytest

import ember
from ember.cli import main as ember_cli

GOOD = '''
import ember

class Good:
    @ember.hookimpl
    def on_train_start(self, trainer):
        trainer.__dict__["good_ran"] = True
'''

EXITS_AT_IMPORT = '''
raise SystemExit(3)
'''

EXITS_WHEN_MADE = '''
import sys

class Plugin:
    def __init__(self):
        sys.exit("no licence")
'''

INTERRUPTED_AT_IMPORT = '''
raise KeyboardInterrupt
'''


@pytest.fixture
def exits(ember_distribution):
    ember_distribution("exit-dist", "0.9", entry_points={"ember.autoload": {"callback.exits": "exits_mod:Plugin"}},
                       modules={"exits_mod.py": EXITS_AT_IMPORT})
    ember_distribution("good-dist", entry_points={"ember.autoload": {"callback.good": "good_plugin:Good"}},
                       modules={"good_plugin.py": GOOD})


def test_system_exit_at_import_is_an_error_naming_distribution_and_entry_point(exits, ember_run) -> None:
    with pytest.warns(ember.EmberWarning) as caught:
        result = ember_run(limit_train_batches=1)
    (message,) = [str(w.message) for w in caught if "callback.exits" in str(w.message)]
    assert "'callback.exits' (from exit-dist 0.9, entry point callback.exits = 'exits_mod:Plugin' in group " \
           "'ember.autoload') failed to load: SystemExit: 3" in message
    assert "exits_mod.py:2" in message and "EMBER_BLOCK_PLUGINS=callback.exits" in message
    assert result.trainer.good_ran is True  # the run went on, with the healthy plugin
    with pytest.raises(ember.PluginError, match="SystemExit: 3"):
        ember.Trainer(strict_plugins=True)


def test_system_exit_when_the_plugin_is_made(ember_distribution) -> None:
    ember_distribution("made-dist", entry_points={"ember.plugins": {"callback.made": "made_mod:Plugin"}},
                       modules={"made_mod.py": EXITS_WHEN_MADE})
    with pytest.raises(ember.PluginError, match=r"'callback.made' \(from made-dist 1.0, entry point .*SystemExit: "
                                                r"no licence"):
        ember.Trainer(callbacks=["made"])


def test_ember_plugins_lists_everything_and_marks_the_broken_one(exits, capsys) -> None:
    assert ember_cli(["plugins"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "callback.exits" in line)
    assert "broken" in line
    assert any("callback.good" in line and "active" in line for line in out.splitlines())
    assert "precision.32-true" in out and "checkpoint_io.torch" in out


def test_keyboard_interrupt_at_import_still_interrupts(ember_distribution) -> None:
    ember_distribution("ctrl-c-dist", entry_points={"ember.autoload": {"callback.ctrlc": "ctrlc_mod:X"}},
                       modules={"ctrlc_mod.py": INTERRUPTED_AT_IMPORT})
    with pytest.raises(KeyboardInterrupt):
        ember.Trainer(accelerator="cpu")


@pytest.fixture
def impostor(ember_distribution):
    """A distribution claiming the identity of ember's default precision: every run would break."""
    ember_distribution("impostor-dist", "6.6", modules={"impostor.py": "class Precision:\n    role = 'precision'\n"},
                       entry_points={"ember.plugins": {"precision.32-true": "impostor:Precision"}})


def test_an_identity_conflict_names_both_and_its_fix_keeps_one(impostor, ember_run, monkeypatch) -> None:
    with pytest.raises(ember.PluginConflictError) as info:
        ember.Trainer()
    message = str(info.value)
    assert "ember 0.1.0" in message and "impostor-dist 6.6" in message
    assert "To keep ember's, block the other distribution with EMBER_BLOCK_PLUGINS=dist:impostor-dist or " \
           "Trainer(block_plugins=['dist:impostor-dist'])" in message
    # the fix works, by argument and by environment, and keeps ember's precision
    result = ember_run(limit_train_batches=1, block_plugins=["dist:impostor-dist"])
    assert result.trainer.role_identities["precision"] == "precision.32-true"
    assert type(result.trainer.role_plugins["precision"]).__module__.startswith("ember.")
    monkeypatch.setenv("EMBER_BLOCK_PLUGINS", "dist:Impostor_Dist")  # spelled as pip would accept it
    trainer = ember.Trainer()
    assert type(trainer.role_plugins["precision"]).__module__.startswith("ember.")


def test_a_conflict_between_two_third_parties_offers_to_keep_either(ember_distribution) -> None:
    for name in ("left-dist", "right-dist"):
        ember_distribution(name, entry_points={"ember.autoload": {"callback.twin": "good_plugin:Good"}},
                           modules={"good_plugin.py": GOOD})
    with pytest.warns(ember.EmberWarning, match=r"To keep left-dist's, .*dist:right-dist.*; to keep right-dist's, "
                                                r".*dist:left-dist"):
        ember.Trainer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = ember.Trainer(block_plugins=["dist:right-dist"])
    # (only this test's plugins: other installed packages may add always-on plugins of their own)
    assert [identity for identity, _ in trainer.autoload_plugins if identity.startswith("callback.tw")] == \
        ["callback.twin"]


def test_misspelled_block_list_names_are_flagged_with_a_suggestion(monkeypatch) -> None:
    with pytest.warns(ember.EmberWarning, match=r"'callback.erly-stopping' names no installed plugin, so it blocks "
                                                r"nothing. Did you mean 'callback.early-stopping'\?"):
        ember.Trainer(block_plugins=["callback.erly-stopping"])
    monkeypatch.setenv("EMBER_BLOCK_PLUGINS", "dist:embr")
    with pytest.warns(ember.EmberWarning, match=r"'dist:embr': no installed distribution named 'embr'.*Did you mean "
                                                r"'ember' \(dist:...\)\?"):
        ember.Trainer()


CLASS_WRAPPER = '''
import ember

class Wraps:
    @ember.hookimpl(wrapper=True)
    def optimizer_step(self, trainer):
        result = yield
        if trainer.global_step == 1:
            raise RuntimeError("wrapper failed")
        return result
'''

MODULE_WRAPPER = '''
import ember

@ember.hookimpl(wrapper=True)
def optimizer_step(trainer):
    result = yield
    if trainer.global_step == 1:
        raise RuntimeError("module wrapper failed")
    return result
'''


@pytest.mark.parametrize("source, value", [(CLASS_WRAPPER, "wrap_mod:Wraps"), (MODULE_WRAPPER, "wrap_mod")],
                         ids=["class", "module"])
def test_an_error_raised_in_a_plugins_wrapper_names_the_plugin(ember_distribution, tmp_path, source: str,
                                                               value: str) -> None:
    from ember.testing import TinyClassifier, tiny_loaders

    ember_distribution("wrap-dist", entry_points={"ember.autoload": {"callback.wraps": value}},
                       modules={"wrap_mod.py": source})
    trainer = ember.Trainer(accelerator="cpu", max_epochs=1, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False)
    with pytest.raises(RuntimeError, match="wrapper failed") as info:
        trainer.fit(TinyClassifier(), *tiny_loaders(n=16))
    assert any("Raised inside the plugin 'callback.wraps' from wrap-dist 1.0" in note
               for note in getattr(info.value, "__notes__", []))
