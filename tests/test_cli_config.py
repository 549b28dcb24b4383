"""``ember fit|validate|test|predict``: config files (YAML, TOML), flags, class paths, errors."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from ember.cli import main

USER_PACKAGE = '''
import torch
from torch.utils.data import DataLoader
from ember.testing import TinyClassifier, tiny_dataset


class Classifier(TinyClassifier):
    def __init__(self, hidden: int = 16, lr: float = 0.1, name: str = "clf"):
        super().__init__(hidden=hidden, lr=lr)
        self.save_hyperparameters()


class Data:
    def __init__(self, n: int = 64, batch_size: int = 8):
        self.n, self.batch_size = n, batch_size

    def train_dataloader(self):
        return DataLoader(tiny_dataset(self.n), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(tiny_dataset(self.n), batch_size=self.batch_size)

    test_dataloader = val_dataloader

    def predict_dataloader(self):
        return DataLoader(tiny_dataset(self.n), batch_size=self.batch_size)
'''


@pytest.fixture(autouse=True)
def _sys_path_put_back(monkeypatch):
    """`ember fit` puts its working directory on sys.path (as `python -m` does); these run it in this process."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's package on the path, and a working directory."""
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "models.py").write_text(USER_PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def config_yaml(root) -> str:
    return textwrap.dedent(f"""
        seed_everything: 7
        trainer:
          max_epochs: 2
          default_root_dir: {root / "runs"}
          logger: csv
          log_every_n_steps: 2
          enable_progress_bar: false
          callbacks:
            - lr-monitor
            - class_path: early-stopping
              init_args: {{monitor: val_loss, patience: 5}}
        model:
          class_path: my_pkg.models:Classifier
          init_args: {{hidden: 12}}
        data: my_pkg.models:Data
    """)


def run_cli(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "ember", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_fit_from_a_yaml_config_in_a_subprocess(project):
    (project / "run.yaml").write_text(config_yaml(project))
    result = run_cli(["fit", "--config", "run.yaml", "--model.lr", "0.05", "--trainer.max_epochs=3"], project)
    assert result.returncode == 0, result.stderr
    log_dir = project / "runs" / "ember_logs" / "version_0"
    with open(log_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["epoch"]) for r in rows if r["val_loss"]} == {0, 1, 2}  # the flag won over the file
    assert any(r.get("lr-SGD") for r in rows)
    assert yaml.safe_load((log_dir / "hparams.yaml").read_text()) == {"hidden": 12, "lr": 0.05, "name": "clf"}
    saved = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert saved["model"] == {"class_path": "my_pkg.models:Classifier",
                              "init_args": {"hidden": 12, "lr": 0.05, "name": "clf"}}
    assert saved["trainer"]["max_epochs"] == 3 and saved["seed_everything"] == 7
    # the saved config repeats the run
    again = run_cli(["fit", "--config", str(log_dir / "config.yaml")], project)
    assert again.returncode == 0, again.stderr
    assert (project / "runs" / "ember_logs" / "version_1" / "metrics.csv").exists()


def test_fit_from_toml_and_flags_only(project, capsys):
    (project / "run.toml").write_text(textwrap.dedent(f"""
        [trainer]
        max_epochs = 1
        default_root_dir = "{project / 'toml_runs'}"
        logger = "csv"
        enable_progress_bar = false
        enable_model_summary = false
        [model]
        class_path = "my_pkg.models:Classifier"
        [model.init_args]
        hidden = 4
        [data]
        class_path = "my_pkg.models:Data"
        init_args = {{ n = 16 }}
    """))
    assert main(["fit", "-c", "run.toml", "--data.batch_size", "4"]) == 0
    with open(project / "toml_runs" / "ember_logs" / "version_0" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r["val_loss"]] == [4]  # 16 samples in batches of 4
    assert main(["test", "--model", "my_pkg.models:Classifier", "--data", "my_pkg.models:Data",
                 "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]) == 0
    assert "test metrics: test_acc=" in capsys.readouterr().out


def test_print_config_is_complete_and_reusable(project, capsys):
    (project / "run.yaml").write_text(config_yaml(project))
    assert main(["fit", "--config", "run.yaml", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"] == {"hidden": 12, "lr": 0.1, "name": "clf"}
    assert printed["data"] == {"class_path": "my_pkg.models:Data", "init_args": {"n": 64, "batch_size": 8}}
    from ember.core.options import declared_options

    assert set(printed["trainer"]) == {option.name for option in declared_options()}
    assert printed["trainer"]["max_epochs"] == 2 and printed["trainer"]["accumulate_grad_batches"] == 1
    (project / "printed.yaml").write_text(yaml.safe_dump(printed))
    assert main(["fit", "--config", "printed.yaml", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == printed


def test_every_trainer_argument_is_a_flag(capsys):
    from ember.core.options import declared_options

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    options = declared_options()
    assert {"max_epochs", "enable_progress_bar", "max_time", "hang_timeout"} <= {o.name for o in options}
    for option in options:
        assert f"--trainer.{option.name}" in text
    assert "show the default progress bar (progress.tqdm)" in text  # the help the declaring plugin gives


@pytest.mark.parametrize(("config", "args", "message"), [
    ("trainer:\n  max_epoch: 3\nmodel: my_pkg.models:Classifier\n", [],
     "unknown key 'trainer.max_epoch'. Did you mean 'trainer.max_epochs'?"),
    ("trainers:\n  max_epochs: 3\nmodel: my_pkg.models:Classifier\n", [],
     "unknown key 'trainers'. Did you mean 'trainer'?"),
    ("max_epochs: 3\nmodel: my_pkg.models:Classifier\n", [], "Trainer arguments go under 'trainer:'"),
    ("model:\n  class_path: my_pkg.models:Classifier\n  init_args: {hiden: 3}\n", [],
     "unknown argument 'hiden' for my_pkg.models:Classifier. Did you mean 'hidden'?"),
    ("model:\n  class_pth: my_pkg.models:Classifier\n", [], "unknown key 'class_pth'. Did you mean 'class_path'?"),
    ("model: my_pkg.models:Classifer\n", [], "has no 'Classifer'. Did you mean 'Classifier'?"),
    ("model: my_pkg.modles:Classifier\n", [], "cannot import module 'my_pkg.modles'"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.max-epoch", "3"],
     "unknown option '--trainer.max-epoch'. Did you mean '--trainer.max-epochs'?"),
    ("model: my_pkg.models:Classifier\n", ["--model.lrr", "3"], "unknown argument 'lrr'"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.max_epochs", "-3"], "Trainer(max_epochs=-3) is invalid"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.logger", "tensorbord"], "Did you mean 'tensorboard'?"),
    ("trainer: {max_epochs: 1}\n", [], "needs a model"),
])
def test_wrong_keys_name_the_key_and_the_closest_valid_one(project, capsys, config, args, message):
    (project / "bad.yaml").write_text(config)
    assert main(["fit", "--config", "bad.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember fit: error: ")
    assert message in err


def test_the_wrong_key_error_from_a_subprocess(project):
    (project / "bad.yaml").write_text("trainer:\n  max_epoch: 3\nmodel: my_pkg.models:Classifier\n")
    result = run_cli(["fit", "--config", "bad.yaml"], project)
    assert result.returncode == 2
    assert "bad.yaml: unknown key 'trainer.max_epoch'. Did you mean 'trainer.max_epochs'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_predict_with_the_prediction_writer(project, capsys):
    assert main(["predict", "--model", "my_pkg.models:Classifier", "--data", "my_pkg.models:Data",
                 "--trainer.logger", "false", "--trainer.callbacks", "[{class_path: prediction-writer, init_args: "
                 f"{{output_dir: {project / 'preds'}, write_interval: epoch}}}}]"]) == 0
    assert "predict: 8 batches" in capsys.readouterr().out
    assert os.listdir(project / "preds") == ["predictions_rank0_dl0.pt"]
