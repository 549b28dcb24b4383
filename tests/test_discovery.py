"""Discovery through real distributions: ``*.dist-info`` folders with ``entry_points.txt`` on ``sys.path``."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.core.hooks import discovery
from ember.testing import TinyClassifier, tiny_loaders

#: Trainer arguments that keep tests quiet: no progress bar, model summary or logger files.
QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False}

Install = Callable[..., Path]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """``install(name, version, entry_points={group: {identity: value}}, modules={name: source})`` writes a
    distribution (its dist-info folder and its modules) into a folder on ``sys.path``."""
    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    for var in (discovery.BLOCK_ENV, discovery.AUTOLOAD_ENV, "EMBER_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    before = set(sys.modules)

    def make(name: str, version: str, entry_points: dict[str, dict[str, str]],
             modules: dict[str, str] | None = None) -> Path:
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = []
        for group, eps in entry_points.items():
            lines.append(f"[{group}]")
            lines += [f"{ident} = {value}" for ident, value in eps.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for module, source in (modules or {}).items():
            (root / f"{module}.py").write_text(textwrap.dedent(source))
        discovery.discover(refresh=True)
        return root

    yield make
    for name in set(sys.modules) - before:
        if name.startswith("thirdparty_"):
            del sys.modules[name]
    # (no refresh needed: the cache is keyed by sys.path, which monkeypatch restores)


PRECISION_SOURCE = '''
    from ember.hookspecs import hookimpl

    CALLS = []

    class HalfwayPrecision:
        """A third-party precision: wraps every step and records it."""
        role = "precision"
        identity = "precision.halfway"

        @hookimpl(wrapper=True)
        def step(self, stage):
            CALLS.append(stage)
            return (yield)
'''

AUTOLOAD_SOURCE = '''
    CALLS = []

    class AlwaysOn:
        """On for every run: a plain method named like an event hook."""
        def on_train_start(self, trainer):
            CALLS.append(trainer.global_step)
'''


def fit(**kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(**QUIET, max_epochs=1, num_sanity_val_steps=0, **kwargs)
    trainer.fit(TinyClassifier(), tiny_loaders(n=8, batch_size=4)[0])
    return trainer


# -- selection by name ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["halfway", "precision.halfway"])
def test_a_third_party_precision_is_selected_by_name(install: Install, name: str) -> None:
    install("thirdparty-halfway", "1.2.3", {"ember.plugins": {"precision.halfway": "thirdparty_halfway:HalfwayPrecision"}},
            {"thirdparty_halfway": PRECISION_SOURCE})
    assert "halfway" in discovery.discover().role_names("precision")
    trainer = fit(precision=name)
    import thirdparty_halfway

    assert trainer.role_identities["precision"] == "precision.halfway"
    assert trainer.precision == "halfway"
    assert trainer.plugin_manager.origins["precision.halfway"] == "thirdparty-halfway 1.2.3"
    assert thirdparty_halfway.CALLS == ["train", "train"]


def test_unknown_name_lists_third_party_plugins_too(install: Install) -> None:
    install("thirdparty-halfway", "1.2.3", {"ember.plugins": {"precision.halfway": "thirdparty_halfway:HalfwayPrecision"}},
            {"thirdparty_halfway": PRECISION_SOURCE})
    with pytest.raises(ember.UnknownPluginError) as info:
        ember.Trainer(**QUIET, precision="halfwya")
    message = str(info.value)
    assert "halfway" in message and "bf16-mixed" in message
    assert "Did you mean 'halfway'?" in message


def test_a_plugin_that_fails_to_import_names_identity_distribution_and_the_way_out(install: Install) -> None:
    install("thirdparty-broken", "0.3", {"ember.plugins": {"precision.broken": "thirdparty_broken:Broken"}},
            {"thirdparty_broken": "import thirdparty_missing_dependency\n"})
    # not selected: nothing is imported, nothing fails
    ember.Trainer(**QUIET, precision="32-true")
    with pytest.raises(ember.PluginError) as info:
        ember.Trainer(**QUIET, precision="broken")
    message = str(info.value)
    for part in ("'precision.broken'", "thirdparty-broken 0.3", "thirdparty_broken:Broken",
                 "ModuleNotFoundError", "thirdparty_missing_dependency",
                 "EMBER_BLOCK_PLUGINS=precision.broken", "block_plugins=['precision.broken']"):
        assert part in message, part


def test_auto_selection_skips_a_broken_plugin_with_a_log_message(install: Install,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    install("thirdparty-broken-gpu", "2.0",
            {"ember.plugins": {"accelerator.brokengpu": "thirdparty_brokengpu:GPU"}},
            {"thirdparty_brokengpu": "raise RuntimeError('driver missing')\n"})
    with caplog.at_level(logging.WARNING, logger="ember"):
        trainer = ember.Trainer(**dict(QUIET, accelerator="auto"))
    # what "auto" picks from the working plugins: the GPU where there is one
    assert trainer.role_identities["accelerator"] == ("accelerator.cuda" if torch.cuda.is_available()
                                                      else "accelerator.cpu")
    assert "accelerator.brokengpu" in caplog.text and "driver missing" in caplog.text


def test_two_distributions_claiming_one_identity(install: Install) -> None:
    eps = {"ember.plugins": {"precision.halfway": "thirdparty_halfway:HalfwayPrecision"}}
    install("thirdparty-halfway", "1.0", eps, {"thirdparty_halfway": PRECISION_SOURCE})
    install("thirdparty-halfway-fork", "9.9", eps)
    with pytest.raises(ember.PluginConflictError) as info:
        ember.Trainer(**QUIET, precision="halfway")
    message = str(info.value)
    assert "'precision.halfway'" in message
    assert "thirdparty-halfway 1.0" in message and "thirdparty-halfway-fork 9.9" in message
    assert "uninstall all but one" in message
    # an identity nobody else claims still works
    ember.Trainer(**QUIET, precision="bf16-mixed")


def test_two_distributions_claiming_a_builtin_identity(install: Install) -> None:
    install("thirdparty-cpu", "0.1", {"ember.plugins": {"accelerator.cpu": "thirdparty_cpu:CPU"}})
    with pytest.raises(ember.PluginConflictError) as info:
        ember.Trainer(**dict(QUIET, accelerator="cpu"))
    message = str(info.value)
    assert "'accelerator.cpu'" in message
    assert f"ember {ember.__version__}" in message and "thirdparty-cpu 0.1" in message


def test_an_invalid_identity_is_reported_with_its_distribution(install: Install) -> None:
    install("thirdparty-badname", "1.0", {"ember.plugins": {"NoRole": "thirdparty_badname:X"}})
    invalid = discovery.discover().invalid
    assert any("'NoRole'" in line and "thirdparty-badname 1.0" in line for line in invalid)
    assert "NoRole" not in discovery.discover().plugins


def test_discovery_is_cached_per_sys_path(install: Install, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = discovery.discover()
    assert discovery.discover() is first
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    assert discovery.discover() is not first


# -- blocking and autoload ----------------------------------------------------------------------------------------


def install_autoload(install: Install) -> Any:
    install("thirdparty-alwayson", "0.5", {"ember.autoload": {"callback.always-on": "thirdparty_alwayson:AlwaysOn"}},
            {"thirdparty_alwayson": AUTOLOAD_SOURCE})
    import thirdparty_alwayson

    return thirdparty_alwayson


def test_an_autoload_plugin_runs_in_every_fit(install: Install) -> None:
    module = install_autoload(install)
    trainer = fit()
    assert module.CALLS == [0]
    assert trainer.plugin_manager.origins["callback.always-on"] == "thirdparty-alwayson 0.5"
    fit()
    assert module.CALLS == [0, 0]


DISABLE = {
    "block_plugins argument": ({"block_plugins": ["callback.always-on"]}, {}),
    "block_plugins string": ({"block_plugins": "precision.64-true, callback.always-on"}, {}),
    "EMBER_BLOCK_PLUGINS": ({}, {discovery.BLOCK_ENV: "callback.always-on"}),
    "EMBER_BLOCK_PLUGINS list": ({}, {discovery.BLOCK_ENV: "precision.64-true,callback.always-on"}),
    "autoload_plugins=False": ({"autoload_plugins": False}, {}),
    "EMBER_DISABLE_PLUGIN_AUTOLOAD=1": ({}, {discovery.AUTOLOAD_ENV: "1"}),
    "EMBER_DISABLE_PLUGIN_AUTOLOAD=true": ({}, {discovery.AUTOLOAD_ENV: "true"}),
}


@pytest.mark.parametrize("way", list(DISABLE))
def test_an_autoload_plugin_can_be_switched_off(install: Install, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    module = install_autoload(install)
    kwargs, env = DISABLE[way]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fit(**kwargs)
    assert module.CALLS == []


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_autoload_env_values_that_leave_it_on(install: Install, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    module = install_autoload(install)
    monkeypatch.setenv(discovery.AUTOLOAD_ENV, value)
    fit()
    assert module.CALLS == [0]


@pytest.mark.parametrize("how", ["name", "identity", "instance"])
@pytest.mark.parametrize("way", list(DISABLE))
def test_a_selected_plugin_is_refused_when_blocked_but_not_affected_by_autoload(
        install: Install, monkeypatch: pytest.MonkeyPatch, way: str, how: str) -> None:
    install("thirdparty-halfway", "1.2.3", {"ember.plugins": {"precision.halfway": "thirdparty_halfway:HalfwayPrecision"}},
            {"thirdparty_halfway": PRECISION_SOURCE})
    import thirdparty_halfway

    selected: Any = {"name": "halfway", "identity": "precision.halfway",
                     "instance": thirdparty_halfway.HalfwayPrecision()}[how]
    kwargs, env = DISABLE[way]
    kwargs = {k: (v.replace("callback.always-on", "precision.halfway") if isinstance(v, str)
                  else [i.replace("callback.always-on", "precision.halfway") for i in v] if isinstance(v, list)
                  else v) for k, v in kwargs.items()}
    for key, value in env.items():
        monkeypatch.setenv(key, value.replace("callback.always-on", "precision.halfway"))
    if "autoload" in way.lower():  # autoload concerns always-on plugins only: selection still works
        assert fit(precision=selected, **kwargs).role_identities["precision"] == "precision.halfway"
        assert thirdparty_halfway.CALLS == ["train", "train"]
        return
    with pytest.raises(ember.PluginError) as info:
        ember.Trainer(**QUIET, precision=selected, **kwargs)
    message = str(info.value)
    assert "precision.halfway" in message and "blocked" in message
    if how != "instance":
        assert "thirdparty-halfway 1.2.3" in message


def test_a_blocked_plugin_is_never_imported(install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    install("thirdparty-brokenauto", "1.0", {"ember.autoload": {"callback.broken-auto": "thirdparty_brokenauto:X"}},
            {"thirdparty_brokenauto": "raise RuntimeError('imported although blocked')\n"})
    monkeypatch.setenv(discovery.BLOCK_ENV, "callback.broken-auto")
    fit()
    assert "thirdparty_brokenauto" not in sys.modules


def test_a_broken_autoload_plugin_warns_or_fails_in_strict_mode(install: Install,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    install("thirdparty-brokenauto", "1.0", {"ember.autoload": {"callback.broken-auto": "thirdparty_brokenauto:X"}},
            {"thirdparty_brokenauto": "raise RuntimeError('cannot start')\n"})
    with pytest.warns(ember.EmberWarning, match=r"callback.broken-auto.*thirdparty-brokenauto 1.0.*cannot start"):
        fit()
    monkeypatch.setenv("EMBER_STRICT_PLUGINS", "1")
    with pytest.raises(ember.PluginError, match="cannot start"):
        ember.Trainer(**QUIET)


def test_blocking_a_builtin_that_is_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(discovery.BLOCK_ENV, "precision.bf16-mixed")
    with pytest.raises(ember.PluginError, match=r"precision 'bf16-mixed'.*blocked.*choose another precision: .*32-true"):
        ember.Trainer(**QUIET, precision="bf16-mixed")
    ember.Trainer(**QUIET, precision="32-true")


def test_blocked_plugins_are_skipped_by_auto_selection() -> None:
    with pytest.raises(ember.PluginError, match=r"strategy='auto' found no available strategy"):
        ember.Trainer(**QUIET, block_plugins=["strategy.single_device"])


def test_the_core_defaults_cannot_be_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ember.PluginError, match="'core.defaults' is essential"):
        ember.Trainer(**QUIET, block_plugins=["core.defaults"])
    monkeypatch.setenv(discovery.BLOCK_ENV, "core.defaults")
    with pytest.raises(ember.PluginError, match="'core.defaults' is essential"):
        ember.Trainer(**QUIET)


def test_builtins_are_found_through_entry_points() -> None:
    found = discovery.discover().plugins
    for identity in ("accelerator.cpu", "accelerator.cuda", "accelerator.mps", "precision.32-true",
                     "precision.64-true", "precision.16-mixed", "precision.bf16-mixed", "precision.16-true",
                     "precision.bf16-true", "strategy.single_device"):
        (info,) = found[identity]
        assert info.dist_name == "ember" and info.group == "ember.plugins"
