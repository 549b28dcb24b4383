"""The generated docs are current, and every hook spec is documented in the required shape."""

from __future__ import annotations

import pathlib
import re
import sys

from ember.hookspecs.reference import iter_specs, render_markdown

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_hook_reference_is_current() -> None:
    page = ROOT / "docs" / "hooks.md"
    assert page.read_text() == render_markdown(), (
        "docs/hooks.md is stale: run `python -m ember.hookspecs.reference > docs/hooks.md`")


def test_every_spec_documents_every_parameter() -> None:
    for spec in iter_specs():
        assert spec.summary, f"{spec.name} has no docstring"
        for arg in spec.arguments:
            assert f":param {arg}:" in spec.doc, f"{spec.name} does not document parameter {arg!r}"
        if spec.firstresult:
            assert "Stops at first non-None result" in " ".join(spec.doc.split()), f"{spec.name}: firstresult contract missing"


def test_reference_lists_every_spec() -> None:
    page = render_markdown()
    for spec in iter_specs():
        assert f"#### `{spec.name}(" in page


def test_every_python_block_of_the_docs_is_collected_or_says_why_not() -> None:
    """README.md and docs/*.md are test paths (conftest.py hands them to pytest-markdown-docs); the few blocks
    marked ``notest`` say why in a comment on their first line."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert {"README.md", "docs"} <= set(config["testpaths"])
    fence = "`" * 3
    skipped = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for info, first in re.findall(rf"^{fence}(python[^\n]*)\n([^\n]*)", page.read_text(), flags=re.M):
            if "notest" in info.split():
                skipped.append(page.name)
                assert first.startswith("#"), f"{page.name}: a python block marked notest must say why: {first!r}"
    assert len(skipped) <= 8, f"too many documentation blocks do not run: {skipped}"
