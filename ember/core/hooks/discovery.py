"""Finding plugins through entry points.

Two entry-point groups, one identity namespace:

* ``ember.plugins``: plugins that are registered when selected by identity (``precision.bf16-mixed``,
  ``accelerator.cuda``, ``strategy.ddp``, ``callback.early-stopping``, ...). Ember's own built-ins are
  declared here in its ``pyproject.toml``, exactly like a third party's.
* ``ember.autoload``: plugins that are on for every run without code changes (pytest's ``pytest11``), unless
  blocked by identity or autoloading is switched off.

pluggy's ``load_setuptools_entrypoints`` is not used: it has no error handling and silently drops a second
distribution claiming a name. This loader names the distribution in every error and reports conflicts.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import re
import sys
from collections.abc import Mapping, Sequence

import attrs

from ember.core.errors import PluginConflictError, PluginError, UnknownPluginError, suggest

PLUGINS_GROUP = "ember.plugins"
AUTOLOAD_GROUP = "ember.autoload"
BLOCK_ENV = "EMBER_BLOCK_PLUGINS"
AUTOLOAD_ENV = "EMBER_DISABLE_PLUGIN_AUTOLOAD"
STRICT_ENV = "EMBER_STRICT_PLUGINS"

_IDENTITY = re.compile(r"^[a-z][a-z0-9_]*\.[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: A block-list entry of this form blocks every plugin of one distribution: ``dist:NAME``.
DIST_PREFIX = "dist:"


def canonical(dist_name: str) -> str:
    """A distribution name as packaging compares them (PEP 503): lower case, runs of ``-_.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def switch_off_hint(identity: str, dist_name: str | None = None) -> str:
    """How to switch a plugin off without uninstalling it (the tail of every plugin error)."""
    hint = f"Switch it off with {BLOCK_ENV}={identity} or Trainer(block_plugins=[{identity!r}])"
    return hint + (f", or uninstall {dist_name}." if dist_name and dist_name != "ember" else ".")


def _check_identity(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not _IDENTITY.match(value):
        raise PluginError(
            f"invalid plugin identity {value!r}: an identity is '<role>.<name>' in lower case, "
            "e.g. 'precision.bf16-mixed' or 'callback.ema'"
        )


@attrs.frozen
class PluginInfo:
    """One discovered plugin: its identity and where it comes from."""

    identity: str = attrs.field(validator=_check_identity)
    group: str
    value: str
    dist_name: str | None = None
    dist_version: str | None = None

    @property
    def role(self) -> str:
        return self.identity.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.identity.split(".", 1)[1]

    @property
    def dist(self) -> str:
        """``name version`` of the providing distribution, for messages."""
        if self.dist_name is None:
            return "an unknown distribution"
        return f"{self.dist_name} {self.dist_version}"

    def resolve(self) -> object:
        """Import the entry point and return what it names (a class is returned as it is)."""
        module_name, _, attr = self.value.partition(":")
        try:
            obj: object = importlib.import_module(module_name.strip())
            for part in filter(None, attr.strip().split(".")):
                obj = getattr(obj, part)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: a plugin's import must not end the process
            raise self._failed(exc) from None
        return obj

    def load(self) -> object:
        """Import the entry point and return the plugin object (a class is instantiated with no arguments)."""
        obj = self.resolve()
        if isinstance(obj, type):
            try:
                obj = obj()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                raise self._failed(exc) from None
        return obj

    def _failed(self, exc: BaseException) -> PluginError:
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ is not None else []
        at = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
        return PluginError(
            f"plugin {self.identity!r} (from {self.dist}, entry point {self.identity} = {self.value!r} in group "
            f"{self.group!r}) failed to load: {type(exc).__name__}: {exc}{at}. "
            f"{switch_off_hint(self.identity, self.dist_name)}")


@attrs.frozen
class Discovery:
    """Everything the installed distributions declare, by identity (several entries mean a conflict)."""

    plugins: Mapping[str, tuple[PluginInfo, ...]]
    autoload: Mapping[str, tuple[PluginInfo, ...]]
    #: Messages for entry points whose name is not a valid identity (they can never be used).
    invalid: tuple[str, ...] = ()
    #: The subset of ``invalid`` declared in the always-on group (reported at Trainer creation).
    invalid_autoload: tuple[str, ...] = ()

    def without_distributions(self, blocked: Sequence[str]) -> Discovery:
        """This discovery without the plugins of the distributions named ``dist:NAME`` in ``blocked``."""
        names = {canonical(b[len(DIST_PREFIX):]) for b in blocked if b.startswith(DIST_PREFIX)}
        if not names:
            return self

        def keep(table: Mapping[str, tuple[PluginInfo, ...]]) -> dict[str, tuple[PluginInfo, ...]]:
            kept = {k: tuple(i for i in v if canonical(i.dist_name or "") not in names) for k, v in table.items()}
            return {k: v for k, v in kept.items() if v}

        return attrs.evolve(self, plugins=keep(self.plugins), autoload=keep(self.autoload))

    def unknown_blocked(self, blocked: Sequence[str], essential: Sequence[str] = ()) -> list[str]:
        """A message for every block-list entry that names nothing installed (a typo, most likely)."""
        identities = sorted({*self.plugins, *self.autoload, *essential})
        dists = sorted({canonical(i.dist_name) for infos in (*self.plugins.values(), *self.autoload.values())
                        for i in infos if i.dist_name})
        problems = []
        for entry in blocked:
            if entry.startswith(DIST_PREFIX):
                name = canonical(entry[len(DIST_PREFIX):])
                if name not in dists:
                    problems.append(f"block list entry {entry!r}: no installed distribution named {name!r} provides "
                                    f"ember plugins.{suggest(name, dists).replace('?', ' (dist:...)?')}")
            elif entry not in identities:
                problems.append(f"block list entry {entry!r} names no installed plugin, so it blocks nothing."
                                f"{suggest(entry, identities)} `ember plugins` lists them.")
        return problems

    def roles(self) -> list[str]:
        """Every role some installed plugin has, sorted."""
        return sorted({identity.split(".", 1)[0] for identity in (*self.plugins, *self.autoload)})

    def check_role(self, role: str) -> str:
        """``role`` if some installed plugin has it; else an error listing the roles, with the closest one."""
        roles = self.roles()
        if role not in roles:
            raise UnknownPluginError(f"unknown plugin role {role!r}: the installed plugins' roles are "
                                     f"{', '.join(roles)}.{suggest(role, roles)}")
        return role

    def role_names(self, role: str) -> list[str]:
        """The selectable names of one role, sorted."""
        return sorted(info[0].name for ident, info in self.plugins.items() if ident.startswith(role + "."))

    def lookup(self, role: str, name: str) -> PluginInfo:
        """The plugin selected as ``name`` for ``role``; ``name`` may be the bare name or the identity."""
        identity = name if name.startswith(role + ".") else f"{role}.{name}"
        found = self.plugins.get(identity)
        if not found:
            roles = self.roles()
            prefix = name.split(".", 1)[0]
            if "." in name and prefix != role and prefix not in roles:  # a misspelled role: 'precison.bf16-mixed'
                raise UnknownPluginError(
                    f"unknown plugin {name!r}: {prefix!r} is not a plugin role (roles: {', '.join(roles)})."
                    f"{suggest(name, self.plugins) or suggest(prefix, roles)} `ember plugins` lists every plugin.")
            choices = self.role_names(role)
            raise UnknownPluginError(
                f"unknown {role} {name!r}: no installed distribution provides the plugin {identity!r}. "
                f"Available {role} plugins: {', '.join(choices) or '(none)'}."
                f"{suggest(identity.split('.', 1)[1], choices)}{LIGHTNING_ONLY.get(identity, '')}"
            )
        return only(identity, found)


#: Lightning's names with no ember plugin, and what to use instead (appended to the "unknown" error).
LIGHTNING_ONLY: dict[str, str] = {}


def only(identity: str, found: tuple[PluginInfo, ...]) -> PluginInfo:
    """The single provider of an identity, or a conflict error naming every provider and how to keep one."""
    if len(found) > 1:
        providers = ", ".join(f"{i.dist} ({i.value})" for i in found)
        # keep ember's own plugin (or else the first), block the others' distributions
        ember = [i for i in found if canonical(i.dist_name or "") == "ember"]
        fixes = []
        for keep in ember or found:  # ember's own plugin can only be kept: blocking ember blocks every built-in
            others = [f"{DIST_PREFIX}{i.dist_name}" for i in found if i is not keep and i.dist_name]
            fixes.append(f"to keep {keep.dist_name}'s, block the other distribution with "
                         f"{BLOCK_ENV}={','.join(others)} or Trainer(block_plugins={others!r})")
        fix = "; ".join(fixes)
        raise PluginConflictError(
            f"plugin identity {identity!r} is claimed by several distributions: {providers}. "
            f"{fix[0].upper()}{fix[1:]}; or uninstall all but one of them."
        )
    return found[0]


def _by_dist(infos: list[PluginInfo]) -> tuple[PluginInfo, ...]:
    # Nothing may depend on the order distributions happen to be installed in: identities are sorted, and
    # the providers of a conflicting identity are listed by distribution.
    return tuple(sorted(infos, key=lambda i: (i.dist_name or "", i.value)))


_cache: dict[tuple[str, ...], Discovery] = {}


def discover(refresh: bool = False) -> Discovery:
    """Scan the installed distributions' entry points (cached per ``sys.path``)."""
    key = tuple(sys.path)
    if not refresh and key in _cache:
        return _cache[key]
    groups: dict[str, dict[str, list[PluginInfo]]] = {PLUGINS_GROUP: {}, AUTOLOAD_GROUP: {}}
    invalid: list[str] = []
    invalid_autoload: list[str] = []
    seen_dists: set[str] = set()
    for dist in metadata.distributions():
        # entry_points.txt first: parsing every distribution's METADATA for its name costs far more
        eps = [ep for ep in dist.entry_points if ep.group in groups]
        if not eps:
            continue
        dist_name = dist.metadata["Name"] or "?"
        canonical = re.sub(r"[-_.]+", "-", dist_name).lower()
        # The same distribution may be visible twice (e.g. an editable install and a build folder); the
        # first on sys.path wins, as for imports.
        if canonical in seen_dists:
            continue
        seen_dists.add(canonical)
        for ep in eps:
            try:
                info = PluginInfo(ep.name, ep.group, ep.value, dist_name, dist.version)
            except PluginError as exc:
                message = f"{exc} (entry point {ep.name!r} in group {ep.group!r} of {dist_name} {dist.version})"
                invalid.append(message)
                if ep.group == AUTOLOAD_GROUP:
                    invalid_autoload.append(message)
                continue
            groups[ep.group].setdefault(ep.name, []).append(info)
    result = Discovery(
        plugins={k: _by_dist(v) for k, v in sorted(groups[PLUGINS_GROUP].items())},
        autoload={k: _by_dist(v) for k, v in sorted(groups[AUTOLOAD_GROUP].items())},
        invalid=tuple(invalid),
        invalid_autoload=tuple(invalid_autoload),
    )
    _cache.clear()
    _cache[key] = result
    return result
