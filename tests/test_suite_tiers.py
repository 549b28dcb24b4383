"""The default run leaves out the tests marked ``extended``, says so, and runs them when asked (docs/install.md,
"The default run and the extended one"); CI's command is the default run."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: one extended case (SIGTERM) beside one of the default run (SIGKILL)
TARGET = "tests/test_reliability_orphans.py"


def collected(warm_python: Any, *options: str) -> tuple[list[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_CORE"))}
    result = warm_python.run(["-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                              # ember (a pytest plugin too) is imported by the warm interpreter before pytest starts
                              "-W", "ignore::pytest.PytestAssertRewriteWarning",
                              *options, TARGET], cwd=ROOT, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    return ids, result.stdout


def test_extended_tests_are_deselected_by_default_and_run_with_the_option(warm_python: Any) -> None:
    default, out = collected(warm_python)
    assert default == [f"{TARGET}::test_workers_die_with_their_launcher[9]"]
    assert re.search(r"1/2 tests collected \(1 deselected\)", out), out
    extended, _ = collected(warm_python, "--extended")
    assert sorted(extended) == [f"{TARGET}::test_workers_die_with_their_launcher[15]",
                                f"{TARGET}::test_workers_die_with_their_launcher[9]"]


def test_ci_runs_the_readmes_test_command_without_the_extended_tests() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/dev.sh test" in ci and "--extended" not in ci
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/dev.sh test --extended" in readme
    marked = sum(len(re.findall(r"mark(s=|\.)(\[?pytest\.mark\.)?extended", p.read_text()))
                 for p in (ROOT / "tests").glob("test_*.py") if p.name != Path(__file__).name)
    assert marked > 0
