"""What every ``ember`` command shares: the command list, one-line errors with suggestions, ``--debug`` and a
closed output pipe."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ember.cli import COMMANDS, _debug_flag, main


def test_the_overview_lists_every_command_and_a_typo_gets_a_suggestion(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "plugins", "hooks", "tune", "plot", "demo", "run",
                 "consolidate"):
        assert f"  {name} " in out and name in COMMANDS
    assert main([]) == 2
    assert main(["fti"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("ember: error: unknown command 'fti'. Did you mean 'fit'?")


def test_demo_errors_are_one_line(capsys) -> None:
    assert main(["demo", "--max-epochs", "x"]) == 2
    err = capsys.readouterr().err
    assert err == "ember demo: error: Argument --max-epochs: invalid int value: 'x'.\n"
    assert main(["demo", "--max-epoch", "3"]) == 2
    assert "unknown option '--max-epoch'. Did you mean '--max-epochs'?" in capsys.readouterr().err
    assert main(["demo", "--precision", "bf16-mixd", "--max-epochs", "1", "--accelerator", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember demo: error: unknown precision 'bf16-mixd'") and err.count("\n") == 1
    assert "Did you mean 'bf16-mixed'?" in err


def test_tune_suggests_its_own_options_and_fit_s(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # ember's fit parser puts the working directory on it
    assert main(["tune", "--lr-fnd", "--model", "torch.nn.Linear"]) == 2
    assert "unknown option '--lr-fnd'. Did you mean '--lr-find'?" in capsys.readouterr().err
    assert main(["tune", "--model", "torch.nn.Linear", "--trainer.max_epoch", "1"]) == 2
    assert "unknown option '--trainer.max_epoch'. Did you mean '--trainer.max_epochs'?" in capsys.readouterr().err


def test_debug_is_taken_out_before_the_command_and_anywhere_but_a_script_s_arguments(monkeypatch) -> None:
    monkeypatch.delenv("EMBER_DEBUG", raising=False)
    assert _debug_flag(["fit", "--debug", "-c", "x.yaml"]) == (["fit", "-c", "x.yaml"], True)
    assert _debug_flag(["--debug", "plugins"]) == (["plugins"], True)
    assert _debug_flag(["run", "train.py", "--debug"]) == (["run", "train.py", "--debug"], False)
    assert _debug_flag(["plugins"]) == (["plugins"], False)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    assert _debug_flag(["plugins"]) == (["plugins"], True)


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": ""}
    # the reader is gone before ember writes a byte: every write fails
    proc = subprocess.Popen([sys.executable, "-m", "ember", "plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert err == ""
    # as a person types it
    shell = subprocess.run(f"'{sys.executable}' -m ember plugins | head -1", shell=True, capture_output=True,
                           text=True, timeout=300, env=env)
    assert shell.stdout.split() == ["IDENTITY", "STATUS", "DISTRIBUTION", "HOOKS"]
    assert shell.stderr == ""
