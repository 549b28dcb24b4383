"""Records LightningCLI's conventions that ``ember fit`` shares (config files, their order with flags, types from
the signatures, class_path/init_args, exit status of a wrong option), for tests/test_cli_config.py.

Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_cli.py > tests/lightning/cli.json

Each scenario's arguments use ``{model}`` and ``{data}`` for the class paths and name config files written
beside them; the test runs the same scenarios through ``ember fit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import yaml

MODULE = '''
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.1, name: str = "clf"):
        super().__init__()
        self.layer = torch.nn.Linear(8, hidden)


class Data(L.LightningDataModule):
    def __init__(self, n: int = 64, batch_size: int = 8):
        super().__init__()

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4)
'''

FILES = {
    "a.yaml": "trainer: {max_epochs: 5, log_every_n_steps: 2}\nmodel:\n  class_path: {model}\n  init_args: {lr: 3e-4}\n",
    "b.yaml": "trainer: {max_epochs: 6}\nmodel:\n  init_args: {hidden: 4}\n",
}

SCENARIOS = {
    "defaults": ["--model", "{model}", "--data", "{data}", "--print_config"],
    "two_configs": ["-c", "a.yaml", "-c", "b.yaml", "--print_config"],
    "flag_between_configs": ["-c", "a.yaml", "--trainer.max_epochs", "9", "-c", "b.yaml", "--print_config"],
    "flag_after_config": ["-c", "a.yaml", "--trainer.max_epochs", "9", "--print_config"],
    "float_flag": ["--model", "{model}", "--model.lr", "3e-4", "--model.name", "007", "--print_config"],
    "unknown_option": ["--model", "{model}", "--trainer.max_epochz", "3"],
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "lt_models.py"), "w") as f:
            f.write(MODULE)
        for name, text in FILES.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text.replace("{model}", "lt_models.Classifier"))
        recorded = {}
        for name, args in SCENARIOS.items():
            argv = [a.replace("{model}", "lt_models.Classifier").replace("{data}", "lt_models.Data") for a in args]
            result = subprocess.run(
                [sys.executable, "-c", "from lightning.pytorch.cli import LightningCLI\n"
                 "LightningCLI(subclass_mode_model=True, subclass_mode_data=True)", "fit", *argv],
                cwd=tmp, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tmp})
            entry: dict = {"status": result.returncode}
            if "--print_config" in argv and result.returncode == 0:
                entry["config"] = yaml.safe_load(result.stdout)
            recorded[name] = entry
    import lightning

    print(json.dumps({"lightning": lightning.__version__, "files": FILES, "scenarios": SCENARIOS,
                      "recorded": recorded}, indent=1, default=str))


if __name__ == "__main__":
    main()
