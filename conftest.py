"""The documentation runs as part of the test suite: every ``python`` block of README.md and docs/*.md is a test.

pytest-markdown-docs turns each block into a test item (a block marked ```` ```python notest ```` is skipped, and
one marked ``continuation`` runs after the block before it). Its ``--markdown-docs`` flag would also collect
the docstrings of every Python file under ``tests/``, so the Markdown files are handed to its collector here
instead, and ``testpaths`` in pyproject.toml names them: ``python -m pytest`` runs them with the rest.

A block of docs/*.md may take a small model, its data or a fitted trainer as given, by naming fixtures of
docs/conftest.py in its info string (```` ```python fixture:model fixture:train_loader ````). A block that cannot
run says why in a comment on its first line. Each block runs in its own empty working directory, and the
environment variables and torch's global modes it changes are put back afterwards.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

try:
    from pytest_markdown_docs.plugin import MarkdownInlinePythonItem, MarkdownTextFile
except ImportError as exc:  # pragma: no cover - the test extra names it
    raise ImportError("the documentation tests need pytest-markdown-docs, part of ember's test extra: "
                      "pip install -e '.[test]'") from exc

ROOT = pathlib.Path(__file__).resolve().parent


def _is_documentation(path: pathlib.Path) -> bool:
    return path.suffix == ".md" and (path == ROOT / "README.md" or path.parent == ROOT / "docs")


def pytest_collect_file(file_path: pathlib.Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _is_documentation(file_path) and not parent.config.option.markdowndocs:  # the flag collects them itself
        return MarkdownTextFile.from_parent(parent, path=file_path)
    return None


@pytest.fixture(autouse=True)
def _documentation_block_in_isolation(request: pytest.FixtureRequest) -> Iterator[None]:
    """A documentation block runs in an empty temporary directory and leaves the process as it found it.

    Requests no fixture for other tests (tests/conftest.py's leak check must be set up before their fixtures)."""
    if not isinstance(request.node, MarkdownInlinePythonItem):
        yield
        return
    import torch

    tmp_path: pathlib.Path = request.getfixturevalue("tmp_path")
    cwd = os.getcwd()
    environ = dict(os.environ)
    modes: list[tuple[Any, Any, Any]] = [
        (torch.get_default_dtype, torch.get_default_dtype(), torch.set_default_dtype),
        (torch.are_deterministic_algorithms_enabled, torch.are_deterministic_algorithms_enabled(),
         torch.use_deterministic_algorithms),
        (torch.get_float32_matmul_precision, torch.get_float32_matmul_precision(), torch.set_float32_matmul_precision),
    ]
    # process-wide defaults a block may switch by taking Lightning's Trainer (its progress bar, checkpoint
    # callback, logger folder, CPU count): the next block, perhaps one written with ember's names, sees ember's
    from ember.core.hooks import options
    from ember.core.loop import data as loop_data

    substitutes = {identity: options.substitute_for(identity) for identity in options.substituted()}
    cpu_counter = loop_data.count_cpus_with(None)
    loop_data.count_cpus_with(cpu_counter)
    os.chdir(tmp_path)
    try:
        yield
    finally:
        for identity in options.substituted():
            options.substitute(identity, None)
        for identity, factory in substitutes.items():
            options.substitute(identity, factory)
        loop_data.count_cpus_with(cpu_counter)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        for read, value, put_back in modes:
            if read() != value:  # only then: torch.use_deterministic_algorithms takes seconds on first use
                put_back(value)
