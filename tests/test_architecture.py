"""The dependency rules of design.md section 1, checked on the source: ``ember.core`` reaches plugins only
through the plugin manager, and ``ember.hookspecs`` imports nothing of ember but its markers."""

from __future__ import annotations

import ast
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
def test_hookspecs_import_nothing_of_ember_but_their_markers(path: Path) -> None:
    """Within the package anything goes (the markers, the spec modules); outside it, nothing at run time
    (``Trainer`` and the like only under ``TYPE_CHECKING``, for annotations)."""
    bad = [(line, m) for line, m in imported_modules(path, skip_type_checking=True)
           if (m == "ember" or m.startswith("ember.")) and not (m == "ember.hookspecs" or
                                                             m.startswith("ember.hookspecs."))]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad} at run time"


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


def _import_time_graph() -> dict[str, set[str]]:
    """ember module -> the ember modules it imports when it is imported: statements at module level (inside
    ``try``/``if`` too), not those in functions or under ``if TYPE_CHECKING``."""
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
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
    cycle = _cycle(_import_time_graph())
    assert cycle is None, f"import cycle at import time: {' -> '.join(cycle or [])}. Move what both sides need " \
                          "into a module that imports neither, or import inside the function that needs it."


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
