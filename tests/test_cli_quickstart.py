"""The quickstart's command-line section, run as written: its ``Classifier`` in ``my_pkg/models.py``, its
``run.yaml``, and each line of its shell block, in a shell, in a fresh directory."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("sklearn")  # the data of the example is the demo's digits

QUICKSTART = Path(__file__).parent.parent / "docs" / "quickstart.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", QUICKSTART.read_text(), flags=re.S | re.M)


def classifier_module() -> str:
    """The imports and the ``Classifier`` class of the quickstart's Python block, without the training below."""
    source = next(b for b in blocks("python") if "class Classifier" in b)
    tree = ast.parse(source)
    keep = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
            or (isinstance(node, ast.ClassDef) and node.name == "Classifier")]
    return "\n\n".join(ast.get_source_segment(source, node) for node in keep) + "\n"


@pytest.mark.slow
def test_the_quickstart_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "models.py").write_text(classifier_module())
    config = next(b for b in blocks("yaml") if b.startswith("# run.yaml"))
    (tmp_path / "run.yaml").write_text(config)
    assert yaml.safe_load(config)["trainer"]["max_epochs"] <= 5  # the commands stay quick
    commands = [line for line in next(b for b in blocks("bash") if "--config run.yaml" in b).splitlines()
                if line.strip() and not line.startswith("#")]
    assert len(commands) == 3 and all(c.startswith("ember ") for c in commands)

    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(tmp_path)}
    outputs = []
    for line in commands:
        result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr
        outputs.append(result.stdout)

    run_hparams = [yaml.safe_load(p.read_text()) for p in sorted(tmp_path.rglob("hparams.yaml"))]
    # the fit's (the flag's 3e-4 is a float), then the validate run's, its module built from run.yaml (as in
    # Lightning, each entry point hands the hyperparameters to its loggers)
    assert [(h["hidden"], h["lr"]) for h in run_hparams] == [(256, 3e-4), (256, 1e-3)]
    printed = yaml.safe_load(outputs[1])
    assert printed["model"]["init_args"] == {"hidden": 256, "lr": 1e-3}
    assert printed["trainer"]["max_epochs"] == 5 and printed["data"]["class_path"] == "ember.demo.DigitsData"
    assert "val_acc" in outputs[2]
