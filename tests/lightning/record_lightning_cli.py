"""Records what a ``main.py`` holding ``LightningCLI(Classifier, Data)`` does on Lightning, for
tests/test_lightning_cli.py, which runs the same script with ``ember.lightning.pytorch``'s names.

Run in an environment with Lightning installed (not a dependency of ember), from the repository root:
    python tests/lightning/record_lightning_cli.py > tests/lightning/lightning_cli.json

Recorded per scenario: the exit status, the ``model`` and ``data`` sections of ``--print_config`` (the
``trainer`` section is each Trainer's own arguments), and, for a fit, where config.yaml was written (relative to
``--trainer.default_root_dir``, the logger's folder name replaced by ``<logs>``) and its ``model`` section.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import yaml

MAIN = '''
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import {pl} as pl
from {pl}.cli import LightningCLI


class Classifier(pl.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.1, name: str = "clf"):
        super().__init__()
        self.layer = torch.nn.Linear(8, hidden)
        self.head = torch.nn.Linear(hidden, 1)
        self.lr = lr

    def training_step(self, batch, batch_idx):
        return self.head(self.layer(batch[0])).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Wide(Classifier):
    def __init__(self, hidden: int = 64, lr: float = 0.1, name: str = "wide", depth: int = 2):
        super().__init__(hidden, lr, name)


class Data(pl.LightningDataModule):
    def __init__(self, n: int = 16, batch_size: int = 4):
        super().__init__()
        self.n, self.batch_size = n, batch_size

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(self.n, 8)), batch_size=self.batch_size)


if __name__ == "__main__":
    if sys.argv[1] == "--subclass":
        sys.argv.pop(1)
        LightningCLI(Classifier, Data, subclass_mode_model=True)
    elif sys.argv[1] == "--no-run":
        sys.argv.pop(1)
        cli = LightningCLI(Classifier, Data, run=False)
        print(type(cli.model).__name__, cli.model.lr, type(cli.datamodule).__name__, cli.datamodule.batch_size)
    else:
        LightningCLI(Classifier, Data)
'''

FILES = {"run.yaml": "model:\n  hidden: 4\n  lr: 0.5\ndata:\n  batch_size: 2\n"}
QUIET = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary",
         "false"]

SCENARIOS = {
    "defaults": ["fit", "--print_config"],
    "flags": ["fit", "--model.hidden", "8", "--model.name", "007", "--data.batch_size", "2", "--print_config"],
    "config_then_flag": ["fit", "-c", "run.yaml", "--model.lr", "0.25", "--print_config"],
    "subclass_mode": ["--subclass", "fit", "--model", "Wide", "--model.depth", "3", "--print_config"],
    "unknown_flag": ["fit", "--model.hiden", "8"],
    "unknown_subcommand": ["train"],
    "fit_writes_config": ["fit", "-c", "run.yaml", *QUIET, "--trainer.default_root_dir", "out"],
    "run_false": ["--no-run", "--model.lr", "0.3", "--data.batch_size", "3"],
}


def run_scenarios(package: str, python: str, env: dict[str, str], run: Any = None) -> dict[str, dict]:
    """Every scenario's record, running ``main.py`` written with ``package``'s names under ``python``: by
    ``run(args, cwd, env)`` when given (``subprocess.run``'s result, as from ``python *args``)."""
    if run is None:
        def run(args: list[str], cwd: str, env: dict[str, str]) -> subprocess.CompletedProcess:
            return subprocess.run([python, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    recorded = {}
    for name, args in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "main.py"), "w") as f:
                f.write(MAIN.replace("{pl}", package))
            for file, text in FILES.items():
                with open(os.path.join(tmp, file), "w") as f:
                    f.write(text)
            result = run(["main.py", *args], tmp,
                         {**env, "PYTHONPATH": os.pathsep.join([tmp, env.get("PYTHONPATH", "")])})
            entry: dict = {"status": result.returncode}
            if "--print_config" in args and result.returncode == 0:
                config = yaml.safe_load(result.stdout)
                entry["config"] = {key: config.get(key) for key in ("model", "data")}
                entry["keys"] = sorted(k for k in config if k in ("seed_everything", "trainer", "model", "data",
                                                                 "ckpt_path"))
            if name == "fit_writes_config":
                entry["written"] = _written(tmp)
            if name == "run_false":
                entry["stdout"] = result.stdout.strip().splitlines()[-1:] if result.returncode == 0 else result.stderr
            recorded[name] = entry
    return recorded


def _written(tmp: str) -> list:
    out = []
    for folder, _, files in os.walk(os.path.join(tmp, "out")):
        if "config.yaml" in files:
            relative = os.path.relpath(os.path.join(folder, "config.yaml"), os.path.join(tmp, "out")).split(os.sep)
            with open(os.path.join(folder, "config.yaml")) as f:
                out.append(["<logs>", *relative[1:], yaml.safe_load(f)["model"]])
    return out


def main() -> None:
    import lightning

    recorded = run_scenarios("lightning.pytorch", sys.executable, dict(os.environ))
    print(json.dumps({"lightning": lightning.__version__, "recorded": recorded}, indent=1))


if __name__ == "__main__":
    main()
