"""``ember fit|validate|test|predict`` on jsonargparse: config files (YAML, TOML), flags and their precedence,
``--print_config``, types from the signatures, class_path/init_args, and one-line errors with suggestions."""

from __future__ import annotations

import csv
import os
import sys
import textwrap
from typing import Any

import pytest
import yaml

import ember
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

QUIET = ["--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
         "--trainer.enable_model_summary", "false", "--trainer.logger", "csv"]


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
    for name in [n for n in sys.modules if n.split(".")[0] == "my_pkg"]:  # another test's package
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def config_yaml(root) -> str:
    return textwrap.dedent(f"""
        seed_everything: 7
        trainer:
          accelerator: cpu
          max_epochs: 2
          default_root_dir: {root / "runs"}
          logger: csv
          log_every_n_steps: 2
          enable_progress_bar: false
          callbacks:
            - lr-monitor
            - class_path: early-stopping
              init_args: {{monitor: val_loss, patience: 5, min_delta: 1e-4}}
        model:
          class_path: my_pkg.models:Classifier
          init_args: {{hidden: 12, lr: 3e-2}}
        data: my_pkg.models.Data
    """)


def run_cli(warm, args, cwd, **env):
    """``python -m ember ARGS`` in a process of its own (forked from a warm interpreter: tests/warm.py)."""
    env = {**os.environ, "PYTHONPATH": str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    return warm.run(["-m", "ember", *args], cwd=cwd, env=env)


def printed(capsys, *args) -> dict:
    assert main(["fit", *args, "--print_config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def metrics(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_fit_from_a_yaml_config_in_a_subprocess(project, warm_python):
    (project / "run.yaml").write_text(config_yaml(project))
    result = run_cli(warm_python, ["fit", "--config", "run.yaml", "--model.lr", "3e-4", "--trainer.max_epochs=3"],
                     project)
    assert result.returncode == 0, result.stderr
    (log_dir,) = [p.parent for p in (project / "runs").rglob("metrics.csv")]  # wherever the logger puts a run
    rows = metrics(log_dir / "metrics.csv")
    assert {int(r["epoch"]) for r in rows if r["val_loss"]} == {0, 1, 2}  # the flag won over the file
    assert {round(float(r["lr-SGD"]), 9) for r in rows if r.get("lr-SGD")} == {3e-4}  # a float, not "3e-4"
    assert yaml.safe_load((log_dir / "hparams.yaml").read_text()) == {"hidden": 12, "lr": 3e-4, "name": "clf"}
    saved = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert saved["model"] == {"class_path": "my_pkg.models.Classifier",
                              "init_args": {"hidden": 12, "lr": 3e-4, "name": "clf"}}
    assert saved["trainer"]["max_epochs"] == 3 and saved["seed_everything"] == 7
    # the saved config repeats it
    again = run_cli(warm_python, ["fit", "--config", str(log_dir / "config.yaml")], project)
    assert again.returncode == 0, again.stderr
    (second,) = [p for p in (project / "runs").rglob("metrics.csv") if p.parent != log_dir]
    assert metrics(second) == rows


def test_several_configs_then_flags_later_wins(project, capsys):
    (project / "run.yaml").write_text(config_yaml(project))
    (project / "small.yaml").write_text("trainer: {max_epochs: 5, log_every_n_steps: 1}\nmodel:\n  init_args: {hidden: 4}\n")
    (project / "tiny.yaml").write_text("trainer: {max_epochs: 6}\n")
    cfg = printed(capsys, "-c", "run.yaml", "--config", "small.yaml", "-c", "tiny.yaml", "--model.lr", "0.5")
    assert cfg["trainer"]["max_epochs"] == 6 and cfg["trainer"]["log_every_n_steps"] == 1
    assert cfg["model"] == {"class_path": "my_pkg.models.Classifier", "init_args": {"hidden": 4, "lr": 0.5,
                                                                                     "name": "clf"}}
    assert cfg["seed_everything"] == 7 and cfg["trainer"]["enable_progress_bar"] is False  # run.yaml's, kept
    cfg = printed(capsys, "-c", "run.yaml", "--trainer.max_epochs", "9", "-c", "tiny.yaml")
    assert cfg["trainer"]["max_epochs"] == 6  # in the order given, as LightningCLI: the later file wins
    cfg = printed(capsys, "-c", "run.yaml", "--trainer.max_epochs", "9")
    assert cfg["trainer"]["max_epochs"] == 9


def test_types_come_from_the_signatures_in_files_and_flags(project, capsys):
    (project / "run.yaml").write_text(config_yaml(project))
    cfg = printed(capsys, "-c", "run.yaml")
    assert cfg["model"]["init_args"]["lr"] == 3e-2 and isinstance(cfg["model"]["init_args"]["lr"], float)
    cfg = printed(capsys, "-c", "run.yaml", "--model.lr", "3e-4", "--trainer.gradient_clip_val", "1e-3",
                  "--trainer.limit_train_batches", "0.5", "--trainer.limit_val_batches", "2", "--model.name", "007")
    assert cfg["model"]["init_args"] == {"hidden": 12, "lr": 3e-4, "name": "007"}  # a str stays a str
    trainer = cfg["trainer"]
    assert (trainer["gradient_clip_val"], trainer["limit_train_batches"], trainer["limit_val_batches"]) == (1e-3, 0.5, 2)
    assert isinstance(trainer["limit_val_batches"], int) and isinstance(trainer["gradient_clip_val"], float)
    assert trainer["callbacks"][1]["init_args"]["min_delta"] == 1e-4


def test_print_config_round_trip_gives_the_same_run(project, capsys):
    args = ["--model", "my_pkg.models:Classifier", "--data", "my_pkg.models.Data", "--data.n", "32",
            "--seed_everything", "3", "--trainer.max_epochs", "2", "--trainer.default_root_dir", "a",
            "--trainer.log_every_n_steps", "1", *QUIET]
    cfg = printed(capsys, *args)
    from ember.core.hooks.options import declared_options

    assert set(cfg) == {"seed_everything", "trainer", "model", "data", "ckpt_path"}
    assert set(cfg["trainer"]) == {option.name for option in declared_options()}  # every default filled in
    assert cfg["data"] == {"class_path": "my_pkg.models.Data", "init_args": {"n": 32, "batch_size": 8}}
    (project / "printed.yaml").write_text(yaml.safe_dump(cfg))
    assert printed(capsys, "--config", "printed.yaml") == cfg
    assert main(["fit", *args]) == 0
    cfg["trainer"]["default_root_dir"] = "b"
    (project / "printed.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", "printed.yaml"]) == 0
    first, second = (metrics(next((project / d).rglob("metrics.csv"))) for d in "ab")
    assert first == second and len(first) == 2 * 4 + 2  # a row per step (4 a epoch), one per epoch


def test_toml_class_paths_and_plugins_by_name_with_init_args(project, capsys):
    (project / "run.toml").write_text(textwrap.dedent("""
        seed_everything = 1
        [trainer]
        max_epochs = 1
        callbacks = ["lr-monitor", { class_path = "early-stopping", init_args = { monitor = "val_loss", min_delta = "1e-3" } },
                     "my_pkg.models:Counter"]
        [model]
        class_path = "my_pkg.models:Classifier"
        [model.init_args]
        hidden = 4
        [data]
        class_path = "my_pkg.models:Data"
        init_args = { n = 16 }
    """))
    (project / "my_pkg" / "models.py").write_text(USER_PACKAGE + "\n\nclass Counter:\n    calls = 0\n\n"
                                                  "    def on_train_epoch_end(self):\n        Counter.calls += 1\n")
    from ember.cli_config import build, parse

    parser, cfg = parse("fit", ["-c", "run.toml", "--data.batch_size", "4"])
    model, data, trainer = build(parser, cfg, "fit")
    assert (type(model).__name__, model.hparams["hidden"], data.n, data.batch_size) == ("Classifier", 4, 16, 4)
    stopping = next(c for c in trainer.callbacks if type(c).__name__ == "EarlyStopping")
    assert stopping.monitor == "val_loss" and abs(stopping.min_delta) == 1e-3  # "1e-3" typed by the signature
    assert any(type(c).__name__ == "LearningRateMonitor" for c in trainer.callbacks)
    assert any(type(c).__name__ == "Counter" for c in trainer.callbacks)


def test_plugin_options_are_in_help_and_settable(capsys):
    from ember.core.hooks.options import declared_options

    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    options = declared_options()
    plugin_options = {o.name for o in options if o.plugin != "core"}
    assert {"enable_progress_bar", "max_time", "hang_timeout", "enable_checkpointing"} <= plugin_options
    for option in options:
        assert f"--trainer.{option.name}" in text
    assert "show the default progress bar (progress.tqdm)" in text  # the help the declaring plugin gives
    cfg = printed(capsys, "--model", "torch.nn.Linear", "--model.in_features", "2", "--model.out_features", "1",
                  "--trainer.max_time", "{minutes: 2}", "--trainer.enable_progress_bar", "false",
                  "--trainer.hang_timeout", "2.5")
    assert (cfg["trainer"]["max_time"], cfg["trainer"]["enable_progress_bar"]) == ({"minutes": 2}, False)
    assert cfg["trainer"]["hang_timeout"] == 2.5


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_commands_pass_ckpt_path_through(project, monkeypatch, stage):
    seen = []
    monkeypatch.setattr(ember.Trainer, stage, lambda self, model, datamodule=None, ckpt_path="unset", **kw:
                        seen.append((type(model).__name__, type(datamodule).__name__, ckpt_path)) or [])
    args = [stage, "--model", "my_pkg.models:Classifier", "--data", "my_pkg.models:Data", *QUIET]
    assert main(args) == 0
    assert main([*args, "--ckpt_path", "somewhere/best.ckpt"]) == 0
    assert seen == [("Classifier", "Data", None), ("Classifier", "Data", "somewhere/best.ckpt")]


@pytest.mark.parametrize(("config", "args", "message"), [
    ("trainer:\n  max_epoch: 3\nmodel: my_pkg.models:Classifier\n", [],
     "unknown key 'trainer.max_epoch' in bad.yaml. Did you mean 'trainer.max_epochs'?"),
    ("trainers:\n  max_epochs: 3\nmodel: my_pkg.models:Classifier\n", [], "Did you mean 'trainer.max_epochs'?"),
    ("max_epochs: 3\nmodel: my_pkg.models:Classifier\n", [], "unknown key 'max_epochs' in bad.yaml. Did you mean"),
    ("model:\n  class_path: my_pkg.models:Classifier\n  init_args: {hiden: 3}\n", [],
     "model: unknown argument 'hiden' for my_pkg.models.Classifier. Did you mean 'hidden'?"),
    ("model:\n  class_pth: my_pkg.models:Classifier\n", [], "unknown key 'class_pth'. Did you mean 'class_path'?"),
    ("model: my_pkg.models:Classifer\n", [], "'my_pkg.models' has no 'Classifer'. Did you mean 'Classifier'?"),
    ("model: my_pkg.modles:Classifier\n", [], "'my_pkg' has no 'modles'. Did you mean 'models'?"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.max_epoch", "3"],
     "unknown option '--trainer.max_epoch'. Did you mean '--trainer.max_epochs'?"),
    ("model: my_pkg.models:Classifier\n", ["--model.lrr", "3"], "unknown argument 'lrr' for my_pkg.models.Classifier. "
                                                                "Did you mean 'lr'?"),
    ("model: my_pkg.models:Classifier\n", ["--model.hidden", "2.5"], "init_args.hidden of my_pkg.models.Classifier: "
                                                                     "expected int, got '2.5'"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.max_epochs", "x"], "--trainer.max_epochs: expected int or null"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.max_epochs", "-3"], "Trainer(max_epochs=-3) is invalid"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.logger", "tensorbord"], "Did you mean 'tensorboard'?"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.callbacks", "[lr-monitr]"], "Did you mean 'lr-monitor'?"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.callbacks", "[{class_path: early-stoping}]"],
     "trainer.callbacks[0]: unknown callback 'early-stoping'. Did you mean 'early-stopping'?"),
    ("model: my_pkg.models:Classifier\n", ["--trainer.callbacks", "{class_path: early-stopping, init_args: {monitr: x}}"],
     "trainer.callbacks: unknown argument 'monitr' for ember.plugins.callbacks.early_stopping.EarlyStopping. "
     "Did you mean 'monitor'?"),
    ("model: my_pkg.models:Classifier\n", ["--data", "my_pkg.models:Classifier"], "data: my_pkg.models.Classifier is "
                                                                                  "not a DataModule"),
    ("model: my_pkg.models:Data\n", [], "model: my_pkg.models.Data is not a torch.nn.Module"),
    ("model: torch.nn.Linear\n", ["--model.in_features", "3"],
     "model: torch.nn.Linear needs init_args.out_features (it has no default)."),
    ("model: my_pkg.models:Classifier\n", ["--trainer.callbacks", "[lr-monitor, early-stopping, {class_path: "
                                                                   "early-stopping}]"],
     "trainer.callbacks[2]: ember.plugins.callbacks.early_stopping.EarlyStopping needs init_args.monitor"),
    ("model: my_pkg.models:Classifier\n", ["-c", "missing.yaml"], "missing.yaml: no such file"),
    ("trainer: {max_epochs: 1}\n", [], "needs a model"),
    ("trainer: [\n", [], "bad.yaml is not a YAML mapping of seed_everything, trainer, model, data, ckpt_path: "),
])
def test_wrong_keys_are_one_line_with_the_closest_valid_one(project, capsys, config, args, message):
    (project / "bad.yaml").write_text(config)
    assert main(["fit", "--config", "bad.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember fit: error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.slow
def test_errors_without_and_with_debug_in_a_subprocess(project, warm_python):
    (project / "bad.yaml").write_text("trainer:\n  max_epoch: 3\nmodel: my_pkg.models:Classifier\n")
    plain = run_cli(warm_python, ["fit", "--config", "bad.yaml"], project)
    assert plain.returncode == 2
    assert plain.stderr == ("ember fit: error: unknown key 'trainer.max_epoch' in bad.yaml. Did you mean "
                            "'trainer.max_epochs'?\n")
    debug = run_cli(warm_python, ["--debug", "fit", "--config", "bad.yaml"], project)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "CLIError" in debug.stderr
    assert "Did you mean 'trainer.max_epochs'?" in debug.stderr
    env = run_cli(warm_python, ["plugins", "--role", "precison"], project, EMBER_DEBUG="1")
    assert "Traceback" in env.stderr and "Did you mean 'precision'?" in env.stderr


def test_predict_with_the_prediction_writer(project, capsys):
    assert main(["predict", "--model", "my_pkg.models:Classifier", "--data", "my_pkg.models:Data",
                 "--ckpt_path", "current", *QUIET, "--trainer.logger", "false", "--trainer.callbacks", "[{class_path: prediction-writer, "
                 f"init_args: {{output_dir: {project / 'preds'}, write_interval: epoch}}}}]"]) == 0
    assert "predict: 8 batches" in capsys.readouterr().out
    assert os.listdir(project / "preds") == ["predictions_rank0_dl0.pt"]


def test_the_conventions_shared_with_lightning_cli(project, capsys):
    """Against LightningCLI itself (recorded by tests/lightning/record_cli.py): the same files and flags give the
    same configuration (LightningCLI's optimizer/lr_scheduler/weights_only keys aside), in the same order of
    precedence, with the same types; a wrong option exits with 2. One departure: LightningCLI takes an unknown
    option that is the prefix of a known one (`--trainer.max_epoch`) as that one; ember calls it a typo."""
    import json
    from pathlib import Path

    fixture = json.loads((Path(__file__).parent / "lightning" / "cli.json").read_text())
    paths = {"{model}": "my_pkg.models.Classifier", "{data}": "my_pkg.models.Data"}

    def ours(text: str) -> str:
        for key, value in paths.items():
            text = text.replace(key, value)
        return text

    for name, text in fixture["files"].items():
        (project / name).write_text(ours(text))
    for name, args in fixture["scenarios"].items():
        recorded = fixture["recorded"][name]
        assert main(["fit", *(ours(a) for a in args)]) == recorded["status"], name
        out = capsys.readouterr().out
        if "config" not in recorded:
            continue
        theirs, mine = recorded["config"], yaml.safe_load(out)
        assert [k for k in theirs if k in mine] == list(mine), name  # the same keys, in the same order
        for key in ("model", "data", "seed_everything", "ckpt_path"):
            expected = theirs[key]
            if isinstance(expected, dict):
                expected = {**expected, "class_path": expected["class_path"].replace("lt_models.", "my_pkg.models.")}
            assert mine[key] == expected, (name, key)
        shared = set(theirs["trainer"]) & set(mine["trainer"])
        assert {"max_epochs", "log_every_n_steps", "accelerator"} <= shared
        assert mine["trainer"]["max_epochs"] == theirs["trainer"]["max_epochs"], name


def test_seed_everything_true_draws_a_seed_that_the_saved_config_keeps(project, monkeypatch):
    for name in ("EMBER_GLOBAL_SEED", "EMBER_SEED_WORKERS", "PL_GLOBAL_SEED", "PL_SEED_WORKERS"):  # as they were
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    from ember.cli_config import build, parse

    drawn = []
    for _ in range(2):
        parser, cfg = parse("fit", ["--model", "my_pkg.models.Classifier", *QUIET])
        assert cfg.seed_everything is True  # LightningCLI's default
        build(parser, cfg, "fit")
        assert isinstance(cfg.seed_everything, int) and not isinstance(cfg.seed_everything, bool)
        assert yaml.safe_load(parser.dump(cfg))["seed_everything"] == cfg.seed_everything
        drawn.append(cfg.seed_everything)
        monkeypatch.delenv("EMBER_GLOBAL_SEED")
        monkeypatch.delenv("PL_GLOBAL_SEED")
    assert drawn[0] != drawn[1]
    monkeypatch.setenv("EMBER_GLOBAL_SEED", "1234")  # a process of a job that has its seed: the same one
    parser, cfg = parse("fit", ["--model", "my_pkg.models.Classifier", *QUIET])
    build(parser, cfg, "fit")
    assert cfg.seed_everything == 1234
    parser, cfg = parse("fit", ["--model", "my_pkg.models.Classifier", "--seed_everything", "false", *QUIET])
    build(parser, cfg, "fit")
    assert cfg.seed_everything is False


def test_evaluation_commands_refuse_untrained_weights_and_name_the_checkpoint_they_use(project, capsys):
    args = ["--model", "my_pkg.models.Classifier", "--data", "my_pkg.models.Data", "--data.n", "32",
            "--trainer.max_epochs", "1", "--trainer.default_root_dir", "runs", *QUIET]
    assert main(["validate", *args]) == 2  # nothing fit under runs/: no silent evaluation of random weights
    err = capsys.readouterr().err
    assert "ember validate stops rather than evaluate weights that may be untrained" in err
    assert "--ckpt_path" in err and len(err.strip().splitlines()) == 1
    assert main(["fit", *args]) == 0
    (ckpt,) = (project / "runs").rglob("last.ckpt")
    capsys.readouterr()
    assert main(["validate", *args]) == 0  # the latest fit's checkpoint, said aloud
    said = capsys.readouterr().err
    assert f"evaluates {ckpt.parent}{os.sep}" in said and "checkpoint of the latest fit" in said
    assert main(["validate", *args, "--ckpt_path", "current"]) == 0  # these weights, on purpose


def test_the_config_keeps_unset_entries_with_either_jsonargparse_keyword() -> None:
    """``skip_unset`` where the installed jsonargparse has it, ``skip_none`` in 4.49 (the oldest supported), whose
    ``dump`` may be wrapped by a patch that takes ``**kwargs`` (the wrapped method is read then)."""
    from jsonargparse import ArgumentParser

    from ember.cli_config import keep_unset

    class Old:
        def dump(self, cfg: Any, skip_none: bool = True, skip_default: bool = False) -> str:
            return ""

    class OldPatched(Old):
        _unpatched_dump = Old.dump

        def dump(self, cfg: Any, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
            return ""

    assert keep_unset(Old(), "dump") == keep_unset(OldPatched(), "dump") == {"skip_none": False}
    parser = ArgumentParser()
    parser.add_argument("--x", type=int | None, default=None)
    assert "x: null" in parser.dump(parser.parse_args([]), **keep_unset(parser, "dump"))
