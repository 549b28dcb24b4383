"""Records what a ``main.py`` holding a ``LightningCLI`` subclass does on Lightning: its hooks
(``add_arguments_to_parser`` with ``link_arguments``/``add_argument``, ``before_instantiate_classes``,
``instantiate_classes``, ``after_instantiate_classes``, ``before_<subcommand>``/``after_<subcommand>``), the
``--optimizer``/``--lr_scheduler`` options Lightning adds, ``seed_everything``, ``trainer_defaults`` and
``cli.model``/``cli.datamodule``/``cli.trainer``/``cli.config`` with ``run=False``. tests/test_lightning_cli.py
runs the same script with ``ember.lightning.pytorch``'s names.

Run in an environment with Lightning installed (not a dependency of ember), from the repository root:
    python tests/lightning/record_lightning_cli_hooks.py > tests/lightning/lightning_cli_hooks.json

Recorded per scenario: the exit status and the lines the script prints that start with ``EVENT``, plus, for
``--print_config``, the top-level keys and the ``model``/``data``/``optimizer``/``lr_scheduler`` sections.
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


def event(*values):
    print("EVENT", *values, flush=True)


class Net(pl.LightningModule):
    def __init__(self, hidden: int = 4, batch_size: int = 1):
        super().__init__()
        self.layer = torch.nn.Linear(8, hidden)
        self.head = torch.nn.Linear(hidden, 1)
        self.batch_size = batch_size

    def training_step(self, batch, batch_idx):
        return self.head(self.layer(batch[0])).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.head(self.layer(batch[0])).pow(2).mean())


class WithOptimizer(Net):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Data(pl.LightningDataModule):
    def __init__(self, n: int = 8, batch_size: int = 4):
        super().__init__()
        self.n, self.batch_size = n, batch_size

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(self.n, 8)), batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(self.n, 8)), batch_size=self.batch_size)


class MyCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        event("add_arguments_to_parser", type(parser).__name__)
        parser.link_arguments("data.batch_size", "model.batch_size")
        parser.add_argument("--tag", default="none")

    def before_instantiate_classes(self):
        sub = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        event("before_instantiate_classes", self.subcommand, sub.tag, sub.model.batch_size)

    def instantiate_classes(self):
        event("instantiate_classes")
        super().instantiate_classes()

    def after_instantiate_classes(self):
        event("after_instantiate_classes", type(self.model).__name__, self.model.batch_size,
              type(self.datamodule).__name__, type(self.trainer).__name__,
              round(float(self.model.layer.weight.sum()), 4), self.trainer.max_epochs)

    def before_fit(self):
        event("before_fit", self.config.fit.tag, self.config.fit.seed_everything)

    def after_fit(self):
        optimizer = self.trainer.optimizers[0]
        event("after_fit", self.trainer.global_step, self.trainer.current_epoch, type(optimizer).__name__,
              round(optimizer.param_groups[0]["lr"], 6))

    def before_validate(self):
        event("before_validate")

    def after_validate(self):
        event("after_validate")


if __name__ == "__main__":
    mode = sys.argv.pop(1)
    model = WithOptimizer if mode.endswith("-own") else Net
    if mode.startswith("--no-run"):
        cli = MyCLI(model, Data, run=False, seed_everything_default=3)
        event("run_false", cli.subcommand, sorted(k for k in cli.config.as_dict() if k in ("model", "data", "trainer",
              "seed_everything", "optimizer", "lr_scheduler", "tag")), cli.config.seed_everything,
              type(cli.model).__name__, type(cli.datamodule).__name__, type(cli.trainer).__name__)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        optimizer = cli.trainer.optimizers[0]
        event("fitted", cli.trainer.global_step, type(optimizer).__name__, round(optimizer.param_groups[0]["lr"], 6))
    elif mode.startswith("--defaults"):
        MyCLI(model, Data, trainer_defaults={"max_epochs": 2, "enable_progress_bar": False,
                                             "enable_model_summary": False, "logger": False,
                                             "enable_checkpointing": False}, save_config_callback=None)
    else:
        MyCLI(model, Data, save_config_callback=None)
'''

QUIET = ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary",
         "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
         "--trainer.num_sanity_val_steps", "0"]
OPTIMIZE = ["--optimizer", "SGD", "--optimizer.lr", "0.2", "--lr_scheduler", "StepLR", "--lr_scheduler.step_size",
            "1", "--lr_scheduler.gamma", "0.5"]

SCENARIOS = {
    "fit_hooks_optimizer": ["--plain", "fit", *QUIET, "--data.batch_size", "2", "--tag", "x", "--seed_everything",
                            "7", *OPTIMIZE],
    "fit_own_optimizer": ["--plain-own", "fit", *QUIET, "--seed_everything", "7"],
    "fit_optimizer_replaces_own": ["--plain-own", "fit", *QUIET, "--seed_everything", "7", "--optimizer", "Adam",
                                   "--optimizer.lr", "0.05"],
    "validate_hooks": ["--plain-own", "validate", *QUIET, "--seed_everything", "1"],
    "print_config": ["--plain", "fit", "--data.batch_size", "2", "--seed_everything", "5", "--optimizer", "SGD",
                     "--optimizer.lr", "0.3", "--print_config"],
    "print_config_link_target_rejected": ["--plain", "fit", "--model.batch_size", "3", "--print_config"],
    "trainer_defaults": ["--defaults-own", "fit", "--seed_everything", "2", "--trainer.num_sanity_val_steps", "0"],
    "run_false": ["--no-run", "--data.batch_size", "2", *QUIET, *OPTIMIZE],
    "run_false_own": ["--no-run-own", *QUIET],
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
            result = run(["main.py", *args], tmp,
                         {**env, "PYTHONPATH": os.pathsep.join([tmp, env.get("PYTHONPATH", "")])})
            entry: dict = {"status": result.returncode,
                           "events": [line.split()[1:] for line in result.stdout.splitlines()
                                      if line.startswith("EVENT ")]}
            if "--print_config" in args and result.returncode == 0:
                config = yaml.safe_load("\n".join(line for line in result.stdout.splitlines()
                                                   if not line.startswith("EVENT ")))
                entry["keys"] = sorted(k for k in config if k != "trainer")
                entry["config"] = {key: config.get(key) for key in ("model", "data", "seed_everything", "tag")}
                optimizer = config.get("optimizer") or {}
                entry["optimizer"] = [optimizer.get("class_path"), (optimizer.get("init_args") or {}).get("lr")]
                entry["lr_scheduler"] = config.get("lr_scheduler")
            recorded[name] = entry
    return recorded


def main() -> None:
    import lightning

    recorded = run_scenarios("lightning.pytorch", sys.executable, dict(os.environ))
    print(json.dumps({"lightning": lightning.__version__, "recorded": recorded}, indent=1))


if __name__ == "__main__":
    main()
