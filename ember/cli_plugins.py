"""``ember plugins`` (what is installed and what a run would use) and ``ember hooks`` (the hook reference)."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

import attrs

from ember.cli_registry import CLIError, command
from ember.core.errors import EmberError, PluginError, suggest
from ember.core.hooks import discovery

#: Status of a plugin in ``ember plugins``.
STATUSES = ("active", "available", "unavailable", "blocked", "conflict", "broken")


@attrs.frozen
class PluginRow:
    """One line of ``ember plugins``."""

    identity: str
    role: str
    group: str  # "selectable", "autoload" or "built-in"
    distribution: str | None
    version: str | None
    value: str | None
    hooks: tuple[dict[str, Any], ...]
    status: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False) | {"hooks": list(self.hooks)}


def _hooks_of(identity: str, plugin: Any, origin: str | None) -> tuple[dict[str, Any], ...]:
    """The hooks ``plugin`` implements, with their ordering options; raises PluginError when invalid."""
    from ember.core.hooks.plugin_manager import PluginManager

    pm = PluginManager()
    pm.register(plugin, name=identity, origin=origin)
    out = []
    for caller in sorted(pm.get_hookcallers(plugin) or (), key=lambda c: c.name):
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                out.append({"name": caller.name, "wrapper": bool(impl.wrapper or impl.hookwrapper),
                            "tryfirst": bool(impl.tryfirst), "trylast": bool(impl.trylast)})
    return tuple(out)


def _selection(selection: dict[str, Any]) -> tuple[dict[str, str], str]:
    """The identities a run configured by ``selection`` would register (besides always-on plugins), each with
    why, or ({}, why not)."""
    from ember.core.api.trainer import Trainer

    try:
        trainer = Trainer(**selection, autoload_plugins=False)
    except EmberError as exc:
        return {}, str(exc)
    active = {identity: f"the {role} of this configuration" for role, identity in trainer.role_identities.items()}
    active.update((identity, "on by default") for identity, _ in trainer.extra_plugins)
    return active, ""


def collect(selection: dict[str, Any] | None = None, block: tuple[str, ...] = (),
            autoload: bool | None = None) -> tuple[list[PluginRow], list[str]]:
    """Every discovered plugin with its status for a run configured by ``selection`` (Trainer arguments for
    the roles), and the messages about entry points with an invalid identity."""
    import warnings

    import ember
    from ember.core.api.trainer import ESSENTIAL, _autoload_env_off, _env_blocked
    from ember.core.hooks.defaults import Defaults

    found = discovery.discover(refresh=True)
    blocked = set(block) | set(_env_blocked())
    autoload_on = (not _autoload_env_off()) if autoload is None else autoload
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        active, selection_error = _selection(dict(selection or {}, block_plugins=sorted(blocked - ESSENTIAL)))
    rows = [PluginRow(Defaults.identity, "core", "built-in", "ember", ember.__version__, None,
                      _hooks_of(Defaults.identity, Defaults(), None), "active",
                      "essential: answers every role hook last, the plain PyTorch way")]
    for group, plugins in (("selectable", found.plugins), ("autoload", found.autoload)):
        for identity, infos in plugins.items():
            rows.append(_row(identity, group, infos, blocked, autoload_on, active, selection_error))
    return rows, list(found.invalid)


def _row(identity: str, group: str, infos: tuple[discovery.PluginInfo, ...], blocked: set[str], autoload_on: bool,
         active: dict[str, str], selection_error: str) -> PluginRow:
    info = infos[0]
    if len(infos) > 1:
        return PluginRow(identity, info.role, group, ", ".join(f"{i.dist_name} {i.dist_version}" for i in infos),
                         None, " | ".join(i.value for i in infos), (), "conflict", _conflict(identity, infos))

    def row(status: str, hooks: tuple[dict[str, Any], ...], detail: str = "") -> PluginRow:
        return PluginRow(identity, info.role, group, info.dist_name, info.dist_version, info.value, hooks, status,
                         detail)

    note = ""
    try:
        plugin: Any = info.resolve()
        if isinstance(plugin, type):
            cls: Any = plugin
            try:
                plugin = cls()
            except TypeError as exc:  # needs arguments: list its hooks from an uninitialised instance
                plugin = cls.__new__(cls)
                note = f"configure it before use ({exc})"
            except (Exception, SystemExit) as exc:  # a plugin must not end `ember plugins`
                raise info._failed(exc) from exc
        hooks = _hooks_of(identity, plugin, info.dist)
    except PluginError as exc:
        return row("broken", (), str(exc))
    if identity in blocked:
        return row("blocked", hooks, f"blocked by {discovery.BLOCK_ENV} or --block")
    if group == "autoload":
        if not autoload_on:
            return row("blocked", hooks, f"autoloading is off ({discovery.AUTOLOAD_ENV})")
        return row("active", hooks, "always on")
    if identity in active:
        return row("active", hooks, active[identity])
    check = getattr(plugin, "check_available", None)
    if callable(check):
        from ember.core.hooks.config import TrainerConfig

        try:
            check(TrainerConfig())
        except EmberError as exc:
            return row("unavailable", hooks, str(exc))
    unresolved = selection_error and info.role in ("accelerator", "precision", "strategy")
    return row("available", hooks, f"configuration not resolved: {selection_error}" if unresolved else note)


def _conflict(identity: str, infos: tuple[discovery.PluginInfo, ...]) -> str:
    try:
        discovery.only(identity, infos)
    except PluginError as exc:
        return str(exc)
    return ""


def _hook_label(hook: dict[str, Any]) -> str:
    flags = [f for f in ("wrapper", "tryfirst", "trylast") if hook[f]]
    return hook["name"] + (f"[{','.join(flags)}]" if flags else "")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    return "\n".join(line.rstrip() for line in out)


def _plugins_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--role", help="only plugins of this role (e.g. precision, callback)")
    p.add_argument("--accelerator", default="auto", help="the accelerator of the run to describe (default: auto)")
    p.add_argument("--precision", default="32-true", help="the precision of the run to describe (default: 32-true)")
    p.add_argument("--strategy", default="auto", help="the strategy of the run to describe (default: auto)")
    p.add_argument("--block", action="append", default=[], metavar="IDENTITY",
                   help="treat this identity as blocked (repeatable; EMBER_BLOCK_PLUGINS is read too)")


@command("plugins", "list the installed plugins: identity, role, distribution, hooks and status in a run",
         _plugins_args)
def _plugins(args: argparse.Namespace) -> int:
    selection = {"accelerator": args.accelerator, "precision": args.precision, "strategy": args.strategy}
    block = tuple(b.strip() for value in args.block for b in value.split(",") if b.strip())
    if args.role:
        found = discovery.discover()
        roles = sorted({"core"} | {i.role for group in (found.plugins, found.autoload) for infos in group.values()
                                   for i in infos})
        if args.role not in roles:
            raise CLIError(f"--role: no plugin has the role {args.role!r}.{suggest(args.role, roles)} "
                           f"Roles: {', '.join(roles)}.")
    rows, invalid = collect(selection, block)
    if args.role:
        rows = [r for r in rows if r.role == args.role]
    if args.json:
        print(json.dumps({"plugins": [r.as_dict() for r in rows], "invalid": invalid}, indent=2))
        return 0
    table = [["IDENTITY", "STATUS", "DISTRIBUTION", "HOOKS"]]
    for r in rows:
        dist = r.distribution if r.version is None else f"{r.distribution} {r.version}"
        table.append([r.identity, r.status, dist or "?", ", ".join(_hook_label(h) for h in r.hooks) or "-"])
    print(_table(table))
    notes = [(r.identity, r.detail) for r in rows if r.status in ("broken", "conflict", "unavailable")]
    notes += [("invalid entry point", message) for message in invalid]
    if notes:
        print()
        for identity, detail in notes:
            print(textwrap.fill(f"{identity}: {detail}", width=110, subsequent_indent="    "))
    return 0


def _hooks_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="HOOK", help="show the full documentation of these hooks")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--family", choices=("event", "role", "configuration"), help="only hooks of this family")


@command("hooks", "list every hook: signature and what it is for (`ember hooks NAME` for the full text)",
         _hooks_args)
def _hooks(args: argparse.Namespace) -> int:
    from ember.hookspecs.reference import specs

    all_specs = specs()
    chosen = [s for s in all_specs if args.family in (None, s.kind)]
    if args.names:
        by_name = {s.name: s for s in all_specs}
        unknown = [n for n in args.names if n not in by_name]
        if unknown:
            raise CLIError(f"no hook named {unknown[0]!r}.{suggest(unknown[0], by_name)} `ember hooks` lists them all.")
        chosen = [by_name[n] for n in args.names]
    if args.json:
        print(json.dumps([s.as_dict() for s in chosen], indent=2))
        return 0
    if args.names:
        for spec in chosen:
            print(f"{spec.typed_signature}    [{spec.kind} hook{', firstresult' if spec.firstresult else ''}]\n")
            print(textwrap.indent(spec.doc, "    ") + "\n")
        return 0
    kind = None
    for spec in chosen:
        if spec.kind != kind:
            kind = spec.kind
            print(f"{'' if spec is chosen[0] else chr(10)}{kind.capitalize()} hooks:")
        marker = "  [firstresult]" if spec.firstresult else ""
        print(f"  {spec.typed_signature}{marker}")
        print(textwrap.fill(spec.summary, width=110, initial_indent="      ", subsequent_indent="      "))
    return 0
