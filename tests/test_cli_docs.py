"""docs/cli.md as written: its config files parse, each ``ember`` command of its shell blocks runs (in this
process, in a fresh directory, in the order shown) and its example errors are what the CLI prints."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml

from ember.cli import main

pytest.importorskip("sklearn")  # the examples train the demo's classifier on the digits

CLI_MD = Path(__file__).parent.parent / "docs" / "cli.md"


def blocks(language: str) -> list[str]:
    """The fenced blocks of ``language`` ("" for those without one), in order."""
    found, current, inside = [], [], None
    for line in CLI_MD.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if inside is None:
                inside, current = line[3:].strip(), []
                continue
            if inside == language:
                found.append("".join(current))
            inside = None
        elif inside is not None:
            current.append(line)
    return found


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "run.yaml").write_text(blocks("yaml")[0])
    (tmp_path / "run.toml").write_text(blocks("toml")[0])
    return tmp_path


def test_the_config_files_are_the_same_run(workdir, capsys) -> None:
    printed = {}
    for name in ("run.yaml", "run.toml"):
        assert main(["fit", "-c", name, "--print_config"]) == 0
        printed[name] = yaml.safe_load(capsys.readouterr().out)
    assert printed["run.yaml"]["model"] == {"class_path": "ember.demo.DigitsClassifier",
                                            "init_args": {"hidden": 64, "lr": 3e-3}}
    assert printed["run.yaml"]["trainer"]["max_epochs"] == printed["run.toml"]["trainer"]["max_epochs"] == 2
    assert printed["run.yaml"]["data"] == printed["run.toml"]["data"]


@pytest.mark.slow
def test_every_command_runs_in_a_bounded_time(workdir, capsys) -> None:
    lines = [line.split(" #")[0].strip() for block in blocks("bash") for line in block.splitlines()]
    commands = [shlex.split(line) for line in lines if line.startswith("ember ")]
    assert len(commands) >= 7
    for words in commands:
        target = None
        if ">" in words:
            words, target = words[:words.index(">")], words[words.index(">") + 1]
        words += [] if "--print_config" in words else ["--trainer.enable_progress_bar", "false"]
        assert main(words[1:]) == 0, " ".join(words)
        out = capsys.readouterr().out
        if target:
            (workdir / target).write_text(out)
    assert yaml.safe_load((workdir / "full.yaml").read_text())["model"]["init_args"]["lr"] == 3e-4


def test_the_example_errors_are_what_the_cli_prints(workdir, capsys) -> None:
    shown = [line for line in blocks("")[-1].splitlines() if line.startswith("ember fit: error: ")]
    (workdir / "good.yaml").write_text(blocks("yaml")[0])
    (workdir / "run.yaml").write_text("model: ember.demo.DigitsClassifier\ntrainer:\n  max_epoch: 3\n")
    tries = [["-c", "run.yaml"], ["-c", "good.yaml", "--trainer.max_epoch", "3"],
             ["-c", "good.yaml", "--model.hiden", "3"], ["-c", "good.yaml", "--model", "ember.demo.DigitsClassifer"],
             ["-c", "good.yaml", "--trainer.max_epochs", "x"]]
    printed = []
    for args in tries:
        assert main(["fit", *args]) == 2
        printed.append(capsys.readouterr().err.strip())
    for line in printed:
        assert line in shown, line
