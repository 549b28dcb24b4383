"""The comparison of a recorder under tests/lightning with what it recorded on Lightning: the recorded JSON, and
the recorder's scenarios run again on ``ember.lightning.pytorch`` (the same code, Lightning's names)."""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def recorded(fixture: str) -> dict[str, Any]:
    """What ``tests/lightning/<fixture>`` holds of Lightning's run."""
    return json.loads((HERE / fixture).read_text())["recorded"]


def on_ember(recorder: str) -> dict[str, Any]:
    """The scenarios of ``tests/lightning/<recorder>.py`` run on ember."""
    import ember.lightning.pytorch as pl

    module = importlib.import_module(f"tests.lightning.{recorder}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging intervals
        return module.scenarios(pl)


def record_on_lightning(scenarios: Any, path: str) -> None:
    """A recorder's main: its ``scenarios`` run on the installed Lightning, written to ``path`` with Lightning's
    version (run the recorder as a script with the side environment's Python, which has Lightning)."""
    import lightning
    import lightning.pytorch

    warnings.filterwarnings("ignore")
    recorded = {"lightning": lightning.__version__, "recorded": scenarios(lightning.pytorch)}
    with open(path, "w") as f:
        json.dump(recorded, f, indent=1)
        f.write("\n")
