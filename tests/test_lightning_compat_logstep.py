"""What reaches a logger, and when, on a Trainer taken through Lightning's names, compared with what Lightning
does (tests/lightning/logger_calls.json, recorded by tests/lightning/record_logger_calls.py on Lightning itself):
each ``log_metrics`` call's step and values and each ``log_hyperparams`` call."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "lightning"
RECORDED = json.loads((HERE / "logger_calls.json").read_text())["recorded"]


@pytest.fixture(scope="module")
def on_ember() -> dict:
    import ember.lightning.pytorch as pl

    sys.path.insert(0, str(HERE))
    try:
        from record_logger_calls import scenarios
    finally:
        sys.path.remove(str(HERE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging intervals
        return scenarios(pl)


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_same_as_lightning(on_ember: dict, case: str) -> None:
    assert on_ember[case] == RECORDED[case]
