"""The dependency rules of design.md section 1, checked on the source: ``ember.core`` reaches plugins only
through the plugin manager, and ``ember.hookspecs`` imports nothing of ember but its markers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ember

PACKAGE = Path(ember.__file__).parent


def imported_modules(path: Path, *, skip_type_checking: bool) -> list[tuple[int, str]]:
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    return scan(path.read_text(), package, skip_type_checking=skip_type_checking)


def scan(source: str, package: str, *, skip_type_checking: bool) -> list[tuple[int, str]]:
    """Every module ``source`` (a module of ``package``) imports, with the line; relative imports resolved."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    if skip_type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found += [(node.lineno, module)]
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def sources(subpackage: str) -> list[Path]:
    files = sorted((PACKAGE / subpackage).rglob("*.py"))
    assert files, subpackage
    return files


@pytest.mark.parametrize("path", sources("core"), ids=lambda p: p.name)
def test_core_never_imports_plugins(path: Path) -> None:
    bad = [(line, m) for line, m in imported_modules(path, skip_type_checking=False)
           if m == "ember.plugins" or m.startswith("ember.plugins.")]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad}"


@pytest.mark.parametrize("path", sources("hookspecs"), ids=lambda p: p.name)
def test_hookspecs_import_nothing_of_ember(path: Path) -> None:
    """The spec layer is the ground floor: within the package anything goes; outside it nothing, not even for
    annotations (the protocols it needs, ``TrainerLike`` and ``OptionRegistry``, live in it)."""
    bad = [(line, m) for line, m in imported_modules(path, skip_type_checking=False)
           if (m == "ember" or m.startswith("ember.")) and not (m == "ember.hookspecs" or
                                                             m.startswith("ember.hookspecs."))]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_the_scan_sees_every_kind_of_import() -> None:
    source = """
import ember.plugins.precision
from ember.plugins import accelerators
from ..plugins.strategies import single_device
from . import errors
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from ember.plugins.precision.fp16_mixed import FP16Mixed
"""
    everything = {m for _, m in scan(source, "ember.core", skip_type_checking=False)}
    assert {"ember.plugins.precision", "ember.plugins", "ember.plugins.strategies", "ember.core",
            "ember.core.errors", "ember.plugins.precision.fp16_mixed"} <= everything
    at_run_time = {m for _, m in scan(source, "ember.core", skip_type_checking=True)}
    assert "ember.plugins.precision.fp16_mixed" not in at_run_time
    assert "ember.plugins.strategies.single_device" in at_run_time


def _plugin_family(module: str) -> str | None:
    """``ember.plugins.<family>...`` -> family (``strategies``, ``environments``, ...); None outside plugins."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["ember", "plugins"] else None


@pytest.mark.parametrize("path", [p for p in sources("plugins") if len(p.relative_to(PACKAGE / "plugins").parts) > 1
                                  and p.relative_to(PACKAGE / "plugins").parts[0] != "_shared"],
                         ids=lambda p: "/".join(p.relative_to(PACKAGE / "plugins").parts))
def test_plugins_never_import_another_plugin_family(path: Path) -> None:
    """A plugin reaches another plugin only through hooks: no module under ember/plugins/X imports
    ember/plugins/Y (Y != X). What several families share lives in ember/plugins/_shared or ember.core."""
    family = path.relative_to(PACKAGE / "plugins").parts[0]
    bad = [(line, m) for line, m in imported_modules(path, skip_type_checking=True)
           if _plugin_family(m) not in (None, family, "_shared")]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports another plugin family: {bad}"


@pytest.mark.parametrize("path", sources("plugins/_shared"), ids=lambda p: p.name)
def test_shared_plugin_helpers_are_not_plugins(path: Path) -> None:
    """ember/plugins/_shared holds helpers: it implements no hook and imports no plugin family."""
    source = path.read_text()
    assert "hookimpl" not in source and "identity = " not in source, path.name
    bad = [(line, m) for line, m in imported_modules(path, skip_type_checking=True)
           if _plugin_family(m) not in (None, "_shared")]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports a plugin family: {bad}"


def test_the_family_rule_catches_a_cross_import() -> None:
    found = scan("from ember.plugins.environments import torchrun\nfrom ..precision import fp16_mixed\n",
                 "ember.plugins.strategies", skip_type_checking=True)
    assert {_plugin_family(m) for _, m in found} >= {"environments", "precision"}


def _import_time_graph(*, type_only: bool = True) -> dict[str, set[str]]:
    """ember module -> the ember modules it imports at module level (inside ``try``/``if`` too): those under
    ``if TYPE_CHECKING`` included (``type_only``), those inside functions not (they run when called, and only
    within one room of ``ember.core``: see ``test_core_rooms_import_downwards``)."""
    modules: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        statements: list[ast.stmt] = []
        pending = list(tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not type_only:
                continue
            if isinstance(node, (ast.If, ast.Try)):
                pending += node.body + node.orelse + getattr(node, "finalbody", []) + \
                    [s for h in getattr(node, "handlers", []) for s in h.body]
            statements.append(node)
        source = "\n".join(ast.unparse(s) for s in statements if isinstance(s, (ast.Import, ast.ImportFrom)))
        graph[name] = {m for _, m in scan(source, package, skip_type_checking=False) if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_cycles() -> None:
    """No circle among ember's modules, the imports made for annotations counted: code that annotates with the
    Trainer uses ``ember.hookspecs.TrainerLike`` (or a protocol of its own room, ``ember.core.loop.parts``)."""
    cycle = _cycle(_import_time_graph())
    assert cycle is None, f"import cycle (imports under TYPE_CHECKING counted): {' -> '.join(cycle or [])}. " \
                          "Move what both sides need into a module that imports neither, or annotate with a " \
                          "protocol (ember.hookspecs.TrainerLike) instead of the class."


def test_the_graph_counts_imports_for_annotations(tmp_path: Path) -> None:
    graph = _import_time_graph()
    assert "ember.core.loop.parts" in graph["ember.core.loop.training"]  # only under TYPE_CHECKING there
    assert "ember.core.loop.parts" not in _import_time_graph(type_only=False)["ember.core.loop.training"]


#: The rooms of ember.core, lowest first: a module may import its own room and the rooms before it, never one
#: after it (imports inside functions and under TYPE_CHECKING included). ember/core/__init__.py says the same.
ROOMS = ("ember.core.errors", "ember.core.hooks", "ember.core.loop", "ember.core.checkpointing", "ember.core.api")
#: What ember.core may import from outside itself, besides ember.hookspecs, by room.
CORE_MAY_ALSO_IMPORT = {"ember.core.api": ("ember.export",)}


def _room(module: str) -> int | None:
    for i, room in enumerate(ROOMS):
        if module == room or module.startswith(room + "."):
            return i
    return None


def core_import_violations(module: str, imported: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The imports of ``module`` (in ember.core) against the rooms' directions."""
    own = _room(module)
    bad = []
    for line, target in imported:
        if not (target == "ember" or target.startswith("ember.")) or target.startswith("ember.hookspecs") or \
                target in ("ember.version", "ember.version.__version__"):
            continue
        room = _room(target)
        if own is None:  # ember/core/__init__.py: the package itself imports nothing of ember
            bad.append((line, target))
        elif room is None:
            if target == "ember.core" or target.startswith("ember.core.") and target.count(".") == 2 and \
                    target.split(".")[2] in {r.split(".")[-1] for r in ROOMS}:
                continue  # ``from ember.core import loop``: the room's package, judged by what it names
            allowed = CORE_MAY_ALSO_IMPORT.get(ROOMS[own], ())
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append((line, target))
        elif room > own:
            bad.append((line, target))
    return bad


def _core_modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


@pytest.mark.parametrize("module,path", _core_modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_core_rooms_import_downwards(module: str, path: Path) -> None:
    bad = core_import_violations(module, imported_modules(path, skip_type_checking=False))
    assert not bad, f"{module} imports against the rooms' direction {' < '.join(ROOMS)}: {bad}. Annotate " \
                    "with a protocol, or move the code to the room that owns what it needs."


def test_the_room_rule_catches_an_upward_import() -> None:
    upward = scan("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ember.core.api.trainer import "
                  "Trainer\n", "ember.core.loop", skip_type_checking=False)
    assert core_import_violations("ember.core.loop.data", upward)
    sideways = scan("from ember.plot import plot_run\n", "ember.core.hooks", skip_type_checking=False)
    assert core_import_violations("ember.core.hooks.tracing", sideways)
    downward = scan("from ember.core.loop.state import Progress\nfrom ember.core import errors\n",
                    "ember.core.checkpointing", skip_type_checking=False)
    assert not core_import_violations("ember.core.checkpointing.checkpoint", downward)


def test_every_core_module_lives_in_a_room() -> None:
    """ember/core holds the rooms, errors.py and its own __init__; the rooms are the ones ember.core names."""
    import ember.core

    loose = sorted(p.name for p in (PACKAGE / "core").glob("*.py") if p.name not in ("__init__.py", "errors.py"))
    assert not loose, f"modules outside a room: {loose}"
    rooms = sorted(p.name for p in (PACKAGE / "core").iterdir() if (p / "__init__.py").exists())
    assert rooms == sorted(ember.core.ROOMS) == sorted(r.split(".")[-1] for r in ROOMS[1:])
    for room, modules in ember.core.ROOMS.items():
        assert sorted(p.stem for p in (PACKAGE / "core" / room).glob("*.py") if p.stem != "__init__") == \
            sorted(modules), room


def test_former_module_paths_import_the_same_module() -> None:
    import importlib

    import ember.core

    for former, now in ember.core.MOVED.items():
        assert importlib.import_module(former) is importlib.import_module(now), former
    from ember.core.trainer import Trainer  # type: ignore[import-not-found]  # a former path

    assert Trainer is ember.Trainer


def test_ember_itself_uses_the_current_paths() -> None:
    """The former paths are for users' code; ember's own code, tests and docs name the rooms."""
    import ember.core

    root = PACKAGE.parent
    texts = [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "docs").glob("*.md"),
             root / "README.md", *(root / "benchmarks").glob("*.py"), *(root / "examples").rglob("*.py")]
    formers = {former: re.compile(re.escape(former) + r"\b") for former in ember.core.MOVED}
    found = [(str(path.relative_to(root)), former) for path in texts if path.exists()
             for former, pattern in formers.items()
             if path.name not in ("__init__.py", "test_architecture.py", "architecture.md")
             and pattern.search(path.read_text())]
    assert not found, f"former module paths in use: {found}"


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
