"""Trainer arguments that plugins own, declared through the ``add_options`` configuration hook.

A plugin declares the Trainer arguments it owns the way a pytest plugin declares its command-line options in
``pytest_addoption``: a static ``add_options(options)`` implementation calls ``options.add(...)`` with the
argument's name, type, default, help and validation, and says whether the argument switches the plugin on
(``switches=``) or makes it the default of a role (``options.default_of("logger")``). The Trainer checks
those arguments with the plugin's validation, switches the plugins on from them, and lists them in
:func:`declared_options`, which the CLI and the docs' argument table read; ``ember.core`` keeps no list of
them.

Declarations are read once per process, from the classes of every installed plugin (their entry points are
imported, not instantiated) and from core's own arguments (:class:`ember.core.hooks.config.TrainerConfig`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pluggy

from ember.core.errors import ConfigurationError, PluginError, suggest

#: The identity under which core's own arguments are listed.
CORE = "core"


@attrs.frozen
class Option:
    """One Trainer argument: what ``Trainer(name=...)`` accepts, its default and what it does.

    ``plugin`` is the identity of the plugin that declared it (``"core"`` for the Trainer's own arguments).
    ``validate(value)`` raises :class:`ember.ConfigurationError` for a bad value. ``switches`` is set for an
    argument that switches its plugin on: the identity prefix of user-passed plugins that take its place
    (``"progress."``: any progress bar replaces the default one); a value of False or None leaves it off.
    """

    name: str
    type: str
    default: Any
    help: str
    plugin: str = CORE
    validate: Callable[[Any], Any] | None = attrs.field(default=None, eq=False, repr=False)
    switches: str | None = None


class OptionRegistry:
    """What an ``add_options`` implementation receives: ``add`` declares an argument, ``default_of`` makes the
    declaring plugin the default of a role."""

    def __init__(self, plugin: str, found: dict[str, Option], defaults: dict[str, str],
                 switches: list[tuple[str, str, str]]) -> None:
        self._plugin, self._found, self._defaults, self._switches = plugin, found, defaults, switches

    def add(self, name: str, *, type: str, default: Any, help: str, validate: Callable[[Any], Any] | None = None,
            switches: str | None = None) -> None:
        """Declare the Trainer argument ``name`` (see :class:`Option`)."""
        other = self._found.get(name)
        if other is not None:
            raise PluginError(f"plugin {self._plugin!r} declares the Trainer argument {name!r}, which "
                              f"{other.plugin!r} declares already; rename one of them.")
        self._found[name] = Option(name, type, default, help, self._plugin, validate, switches)
        if switches is not None:
            self._switches.append((name, self._plugin, switches))

    def switched_on_by(self, name: str, *, replaced_by: str) -> None:
        """Let an argument declared elsewhere (one of core's, such as ``log_every_n_steps``) switch the declaring
        plugin on: a value other than False/None does, unless the user passed a plugin whose identity starts
        with ``replaced_by``."""
        self._switches.append((name, self._plugin, replaced_by))

    def default_of(self, role: str) -> None:
        """Make the declaring plugin the one ``Trainer(<role>=True)`` selects (the CSV logger for ``logger``)."""
        self._defaults[role] = self._plugin


@attrs.frozen
class Declarations:
    """Every declared Trainer argument, by name; the default plugin of each role that has one; and which
    argument switches which plugin on: (argument, plugin identity, identity prefix of the plugins that replace
    it), in the order of the plugins' identities."""

    options: dict[str, Option]
    defaults: dict[str, str]
    switches: list[tuple[str, str, str]]

    def of_plugins(self) -> list[Option]:
        return [o for o in self.options.values() if o.plugin != CORE]


def declared_options() -> list[Option]:
    """Every Trainer argument: core's own, then those installed plugins declare, each with its name, type,
    default, help and the identity of the plugin that owns it. For ``ember``'s CLI and the docs' argument
    table. A plugin that is not installed (or is blocked only later, by a Trainer) still has its arguments
    listed here; the Trainer ignores the arguments of a plugin it does not load."""
    return list(declarations().options.values())


_cache: dict[tuple[tuple[str, str], ...], Declarations] = {}

#: What a switched-on default plugin is built as instead, by identity (see :func:`substitute`).
_substitutes: dict[str, Callable[[], Any]] = {}


def substitute(identity: str, factory: Callable[[], Any] | None) -> Callable[[], Any] | None:
    """From now on in this process, the Trainer argument that switches ``identity`` on (``enable_progress_bar``
    for ``progress.tqdm``; ``logger=True`` for the default logger, ``logger.tensorboard`` or ``logger.csv``)
    builds ``factory()`` in its place; None goes back to the installed plugin. The replacement keeps the identity
    (blocking, ``ember plugins`` and a plugin passed in its place work as before); the plugin named explicitly
    (``logger="csv"``) is not replaced. The Lightning layer uses it so that a script that takes Lightning's
    ``Trainer`` gets Lightning's progress bar, ``ModelCheckpoint`` and ``lightning_logs`` folder. ``logger.null`` is
    what stands in for the loggers under ``fast_dev_run`` (:mod:`ember.core.api.null_logger`).
    Returns the factory that was set before."""
    before = _substitutes.pop(identity, None)
    if factory is not None:
        _substitutes[identity] = factory
    return before


def check_switch(name: str, value: Any, role: str | None, passed: list[tuple[str, Any]]) -> None:
    """Refuse a switch turned off while a plugin that takes its place is passed (``enable_progress_bar=False``
    with a progress bar in ``callbacks``), and two progress bars (one draws at a time)."""
    if value is False and passed:
        raise ConfigurationError(f"Trainer({name}=False) conflicts with {passed[0][0]!r} passed in callbacks/plugins "
                                 f"(`{name}=False` but found `{type(passed[0][1]).__name__}`); remove one of them.")
    if role == "progress" and len(passed) > 1:
        raise ConfigurationError(f"You added multiple progress bar callbacks to the Trainer "
                                 f"({', '.join(type(p).__name__ for _, p in passed)}); one draws at a time: pass one.")


def substitute_for(identity: str) -> Callable[[], Any] | None:
    """The factory :func:`substitute` set for ``identity``, or None."""
    return _substitutes.get(identity)


def substituted() -> tuple[str, ...]:
    """The identities :func:`substitute` replaces at present."""
    return tuple(_substitutes)


def declarations() -> Declarations:
    """Read the declarations of the installed plugins (once per set of installed plugins)."""
    from ember.core.hooks import discovery

    found = discovery.discover()
    infos = {identity: entries for group in (found.plugins, found.autoload) for identity, entries in group.items()}
    key = tuple(sorted((identity, entry.value) for identity, entries in infos.items() for entry in entries))
    if key not in _cache:
        _cache[key] = _read_declarations(infos)
    return _cache[key]


def _read_declarations(infos: Mapping[str, tuple[Any, ...]]) -> Declarations:
    from ember.core.hooks import discovery
    from ember.core.hooks.config import core_options
    from ember.core.hooks.dispatch import HookTable
    from ember.hookspecs import PROJECT
    from ember.hookspecs import config as config_specs

    pm = _DeclarationManager(PROJECT)
    pm.add_hookspecs(config_specs)
    for identity, entries in sorted(infos.items(), reverse=True):  # called last registered first: in order
        try:
            plugin = discovery.only(identity, entries).resolve()
        except PluginError:
            continue  # reported by the run that tries to use it
        if getattr(plugin, "add_options", None) is not None:
            pm.register(plugin, name=identity)
    found = {option.name: option for option in core_options()}
    defaults: dict[str, str] = {}
    switches: list[tuple[str, str, str]] = []

    def scoped(impl: pluggy.HookImpl) -> pluggy.HookImpl:
        registry = OptionRegistry(impl.plugin_name, found, defaults, switches)
        function = impl.function

        def add_options(options: Any) -> None:
            function(options=registry)

        return pluggy.HookImpl(impl.plugin, impl.plugin_name, add_options, impl.opts)

    HookTable(pm).call_each("add_options", scoped, options=None)
    unknown = [(name, plugin) for name, plugin, _ in switches if name not in found]
    if unknown:
        raise PluginError(f"plugin {unknown[0][1]!r} is switched on by the Trainer argument {unknown[0][0]!r}, "
                          f"which nothing declares.{suggest(unknown[0][0], found)}")
    return Declarations(found, defaults, switches)


class _DeclarationManager(pluggy.PluginManager):
    """A plugin manager for plugin classes and ``add_options`` only (the hook table asks it to notify)."""

    def subscribe(self, listener: Callable[[], None]) -> None:
        pass

    @property
    def monitors(self) -> tuple[Any, ...]:
        return ()


def check(values: dict[str, Any]) -> None:
    """Validate the arguments plugins own with their declarations (core's are checked by TrainerConfig)."""
    for option in declarations().of_plugins():
        if option.validate is not None and option.name in values:
            option.validate(values[option.name])


def invalid(name: str, value: Any, allowed: str) -> ConfigurationError:
    """The error for a bad value of a Trainer argument: names the argument, the value and what is allowed."""
    return ConfigurationError(f"Trainer({name}={value!r}) is invalid: {allowed}.")


def boolean(name: str) -> Callable[[Any], None]:
    """The validation of a True/False argument."""

    def validate(value: Any) -> None:
        if not isinstance(value, bool):
            raise invalid(name, value, "expected True or False")

    return validate


def markdown_row(option: Option) -> str:
    """The row of docs/trainer.md's argument tables for ``option`` (tests/test_options.py keeps them in step)."""
    return f"| `{option.name}` | `{option.default!r}` | {option.help[:1].upper()}{option.help[1:]} (`{option.plugin}`). |"


if __name__ == "__main__":
    for declared in declarations().of_plugins():
        print(markdown_row(declared))
