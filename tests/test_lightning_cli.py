"""LightningCLI on ember (ember.lightning.pytorch.cli): the same main.py, written with ember's names, run in a
process of its own (forked from a warm interpreter: tests/warm.py) and compared with the record made on Lightning
(tests/lightning/record_lightning_cli.py)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
from dist_support import once_per_session
from warm import Warm

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent / "lightning"
FIXTURE = json.loads((HERE / "lightning_cli.json").read_text())["recorded"]
#: A LightningCLI subclass's hooks, --optimizer/--lr_scheduler, seed_everything, trainer_defaults and run=False
#: (tests/lightning/record_lightning_cli_hooks.py).
HOOKS_FIXTURE = json.loads((HERE / "lightning_cli_hooks.json").read_text())["recorded"]
ROOT = Path(__file__).parent.parent


def _record_on_ember(recorder: str, warm: Warm) -> dict[str, dict]:
    """Run the scenarios of ``tests/lightning/<recorder>.py`` with ember's names."""
    sys.path.insert(0, str(HERE))
    try:
        module = importlib.import_module(recorder)
    finally:
        sys.path.remove(str(HERE))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return module.run_scenarios("ember.lightning.pytorch", sys.executable, env, run=warm.run)


def _recorded_once(factory: pytest.TempPathFactory, recorder: str, warm: Warm) -> dict[str, dict]:
    """The scenarios run once per session, not once per pytest-xdist worker that runs one of them."""
    out = once_per_session(factory, recorder, lambda out: (out / "record.json").write_text(
        json.dumps(_record_on_ember(recorder, warm))))
    return json.loads((out / "record.json").read_text())


@pytest.fixture(scope="module")
def ember_record(warm_python: Warm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return _recorded_once(tmp_path_factory, "record_lightning_cli", warm_python)


@pytest.mark.parametrize("scenario", sorted(FIXTURE))
def test_same_as_lightning(ember_record: dict[str, dict], scenario: str) -> None:
    assert ember_record[scenario] == FIXTURE[scenario]


@pytest.fixture(scope="module")
def ember_hooks_record(warm_python: Warm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return _recorded_once(tmp_path_factory, "record_lightning_cli_hooks", warm_python)


@pytest.mark.parametrize("scenario", sorted(HOOKS_FIXTURE))
def test_subclass_hooks_same_as_lightning(ember_hooks_record: dict[str, dict], scenario: str) -> None:
    assert ember_hooks_record[scenario] == HOOKS_FIXTURE[scenario]


def test_run_false_and_print_config_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    import ember.lightning.pytorch as pl
    from ember.lightning.pytorch.cli import LightningCLI

    class Tiny(pl.LightningModule):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(width, 1)

    cli = LightningCLI(Tiny, run=False, args=["--model.width", "5", "--trainer.max_epochs", "2"])
    assert cli.model.layer.in_features == 5 and cli.trainer.config.max_epochs == 2 and cli.subcommand is None
    with pytest.raises(SystemExit) as exit_info:
        LightningCLI(Tiny, args=["fit", "--model.width", "7", "--print_config"])
    assert exit_info.value.code == 0 and "width: 7" in capsys.readouterr().out
