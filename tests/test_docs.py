"""The generated docs are current, and every hook spec is documented in the required shape."""

from __future__ import annotations

import pathlib

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
