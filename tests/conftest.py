"""Suite-wide fixtures."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture(autouse=True)
def _run_in_a_temporary_directory(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own empty working directory, so runs that write to the default root
    (logs, checkpoints) never touch the checkout and never see another test's files."""
    monkeypatch.chdir(tmp_path)
