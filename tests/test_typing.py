"""What a type checker checks in a plugin: ``ember.hookimpl`` options, and implementations that inherit the
hook's protocol from :mod:`ember.hookspecs.protocols`. Runs mypy on a small plugin module."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

PLUGIN = '''
from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

import ember
from ember.hookspecs import TrainerLike
from ember.hookspecs.protocols import EventHooks, OnTrainBatchEnd, OnTrainBatchStart, RootDevice


class Good(OnTrainBatchStart, OnTrainBatchEnd, RootDevice):
    @ember.hookimpl
    def on_train_batch_start(self, trainer: TrainerLike, module: Any, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx > 10 else None

    @ember.hookimpl
    def on_train_batch_end(self, trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass

    @ember.hookimpl(tryfirst=True)
    def root_device(self, trainer: TrainerLike) -> torch.device:
        return torch.device("cpu")


class Callback(EventHooks):  # implements a few event hooks, Lightning-callback style
    def on_train_start(self, trainer: TrainerLike, module: Any) -> None:
        pass


class WrongArgumentType(OnTrainBatchEnd):
    @ember.hookimpl
    def on_train_batch_end(self, trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: str) -> None:  # LINE wrong-type
        pass


class WrongReturnType(OnTrainBatchStart):
    @ember.hookimpl
    def on_train_batch_start(self, trainer: TrainerLike, module: Any, batch: Any, batch_idx: int) -> str:  # LINE wrong-return
        return "stop"


class Subset(OnTrainBatchEnd):
    @ember.hookimpl
    def on_train_batch_end(self, batch_idx: int) -> None:  # LINE subset
        pass


class Untyped:  # no protocol: only the marker's options are checked
    @ember.hookimpl(wrapper=True)
    def step(self) -> Generator[None, Any, Any]:
        return (yield)

    @ember.hookimpl(try_first=True)  # LINE option-typo
    def on_fit_start(self) -> None:
        pass


Good(), Callback(), Untyped()
reveal_type(ember.hookimpl(tryfirst=True)(Good.on_train_batch_start))  # LINE reveal
'''


def test_mypy_checks_implementations_against_the_specs(tmp_path: Path) -> None:
    source = textwrap.dedent(PLUGIN)
    (tmp_path / "plugin.py").write_text(source)
    lines = {m.group(1): i + 1 for i, line in enumerate(source.splitlines())
             if (m := re.search(r"# LINE ([\w-]+)", line))}
    # torch's own annotations are skipped (its types become Any): analysing them takes half a minute.
    (tmp_path / "mypy.ini").write_text("[mypy]\nfollow_imports = silent\n[mypy-torch.*]\nfollow_imports = skip\n")
    env = {**os.environ, "MYPYPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-error-summary",
                           "--cache-dir", str(tmp_path / ".mypy_cache"), "--show-error-codes", "plugin.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"^plugin\.py:(\d+): error: (.*)$", out, re.M)}
    assert lines["wrong-type"] in errors and 'supertype defines the argument type as "int"' in \
        errors[lines["wrong-type"]], out
    assert lines["wrong-return"] in errors and "incompatible with return type" in errors[lines["wrong-return"]]
    assert lines["subset"] in errors and "incompatible with supertype" in errors[lines["subset"]]
    assert lines["option-typo"] in errors and 'did you mean "tryfirst"' in errors[lines["option-typo"]]
    # Nothing else: the good plugin, the partial EventHooks callback and the untyped wrapper pass.
    assert set(errors) == {lines[k] for k in ("wrong-type", "wrong-return", "subset", "option-typo")}, out
    assert re.search(rf"^plugin\.py:{lines['reveal']}: note: Revealed type is \"def \(self: .*Good, trainer: "
                     r"ember\.hookspecs\.trainer\.TrainerLike, module: Any, batch: Any, batch_idx: (builtins\.)?int\) -> ",
                     out, re.M), out
