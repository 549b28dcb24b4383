"""The example plugin package, installed with pip into a fresh virtual environment, as a user would.

The environment sees the test environment's packages (torch, pytest, setuptools) through a ``.pth`` file
and ``--system-site-packages``, so nothing is downloaded; ember itself and the example package are built
from copies of their source trees and installed into it with ``pip install --no-deps --no-build-isolation
--no-index``. Every check then runs in a subprocess of that environment.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ember-plugin-example"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def _site_dirs() -> list[str]:
    """This environment's package directories, the one with the newest setuptools first (the build backend
    must be able to make wheels offline: setuptools >= 70.1 has ``bdist_wheel`` built in)."""
    dirs = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]
    versions = {}
    for d in dirs:
        for dist in importlib.metadata.distributions(path=[d]):
            if (dist.metadata["Name"] or "").lower() == "setuptools":
                versions[d] = _version(dist.version)
    best = max(versions, key=versions.__getitem__, default=None)
    if best is None or versions[best] < (70, 1):
        pytest.fail(f"installing a package offline needs setuptools >= 70.1 in the test environment (found "
                    f"{versions or 'none'}); install ember's test extra: pip install -e '.[test]'")
    return [best] + [d for d in dirs if d != best]


class FreshEnv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "env" / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / ("python.exe" if os.name == "nt" else "python")
        self.example = root / "src" / "ember-plugin-example"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EMBER_", "PYTHON", "COV_CORE")) and k != "VIRTUAL_ENV"}
        env.update(PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
        return env

    def run(self, *args: str | os.PathLike, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(a) for a in args], cwd=cwd or self.root, env=self.env(**env),
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, args))} exited with {proc.returncode}\n"
                                 f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        return proc

    def python_json(self, script: str, **env: str) -> dict:
        out = self.run(self.python, "-c", textwrap.dedent(script), **env).stdout
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("fresh")
    env = FreshEnv(root)
    src = root / "src"
    # Build from copies, so the builds leave nothing behind in the repository.
    shutil.copytree(REPO / "ember", src / "ember" / "ember", ignore=_IGNORE)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / "ember" / name)
    shutil.copytree(EXAMPLE, env.example, ignore=_IGNORE)

    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(root / "env")
    purelib = subprocess.run([str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env=env.env()).stdout.strip()
    Path(purelib, "_test_environment.pth").write_text("\n".join(_site_dirs()) + "\n")
    env.run(env.python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
            src / "ember", env.example)
    return env


def test_installed_copies_are_the_ones_used(fresh: FreshEnv) -> None:
    where = fresh.python_json("""
        import json, ember, ember_plugin_example
        print(json.dumps([ember.__file__, ember_plugin_example.__file__]))
    """)
    env_dir = str(fresh.root / "env")
    assert all(path.startswith(env_dir) for path in where), where


def test_listed_by_ember_plugins(fresh: FreshEnv) -> None:
    listing = json.loads(fresh.run(fresh.bin / "ember", "plugins", "--json").stdout)
    rows = {row["identity"]: row for row in listing["plugins"]}
    tf32, summary = rows["precision.tf32"], rows["callback.run-summary"]
    assert (tf32["distribution"], tf32["version"], tf32["role"]) == ("ember-plugin-example", "0.1.0", "precision")
    assert (tf32["group"], tf32["status"]) == ("selectable", "available")
    assert [h["name"] for h in tf32["hooks"]] == ["setup", "teardown"]
    assert (summary["group"], summary["status"], summary["distribution"]) == ("autoload", "active",
                                                                             "ember-plugin-example")
    assert {h["name"] for h in summary["hooks"]} == {"on_fit_start", "on_fit_end", "on_exception",
                                                     "on_save_checkpoint", "on_load_checkpoint"}
    assert rows["precision.32-true"]["status"] == "active"

    selected = json.loads(fresh.run(fresh.bin / "ember", "plugins", "--json", "--precision", "tf32").stdout)
    statuses = {row["identity"]: row["status"] for row in selected["plugins"]}
    assert statuses["precision.tf32"] == "active" and statuses["precision.32-true"] == "available"

    text = fresh.run(fresh.bin / "ember", "plugins", EMBER_BLOCK_PLUGINS="callback.run-summary").stdout
    line = next(line for line in text.splitlines() if line.startswith("callback.run-summary"))
    assert line.split()[1] == "blocked" and "ember-plugin-example 0.1.0" in line


FIT = """
    import json, os, sys, torch, ember
    from ember.testing import TinyClassifier, tiny_loaders

    class Probe(TinyClassifier):
        seen = set()
        def training_step(self, batch, batch_idx):
            self.seen.add(torch.get_float32_matmul_precision())
            return super().training_step(batch, batch_idx)

    root = sys.argv[1] if len(sys.argv) > 1 else os.environ["RUN_DIR"]
    kwargs = json.loads(os.environ.get("TRAINER_KWARGS", "{}"))
    trainer = ember.Trainer(max_epochs=1, num_sanity_val_steps=0, default_root_dir=root, **kwargs)
    model = Probe()
    trainer.fit(model, *tiny_loaders())
    summary = os.path.join(root, "run_summary.json")
    print(json.dumps({
        "precision": trainer.role_identities["precision"],
        "plugin": type(trainer.role_plugins["precision"]).__module__,
        "seen": sorted(model.seen),
        "after": torch.get_float32_matmul_precision(),
        "autoloaded": [identity for identity, _ in trainer.autoload_plugins],
        "summary": json.load(open(summary)) if os.path.exists(summary) else None,
    }))
"""


def test_selected_by_name_from_the_trainer_and_always_on_behaviour_runs(fresh: FreshEnv, tmp_path: Path) -> None:
    result = fresh.python_json(FIT, RUN_DIR=str(tmp_path), TRAINER_KWARGS=json.dumps({"precision": "tf32"}))
    assert result["precision"] == "precision.tf32"
    assert result["plugin"] == "ember_plugin_example.tf32"
    assert result["seen"] == ["high"] and result["after"] == "highest"
    assert result["autoloaded"] == ["callback.run-summary"]
    assert result["summary"]["outcome"] == "finished"
    assert result["summary"]["precision"] == "tf32" and result["summary"]["global_step"] == 8


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_switched_off_by_identity_without_uninstalling(fresh: FreshEnv, tmp_path: Path, how: str) -> None:
    if how == "argument":
        env = {"TRAINER_KWARGS": json.dumps({"block_plugins": ["callback.run-summary"]})}
    else:
        env = {"EMBER_BLOCK_PLUGINS": "callback.run-summary"}
    result = fresh.python_json(FIT, RUN_DIR=str(tmp_path), **env)
    assert result["autoloaded"] == [] and result["summary"] is None
    assert not (tmp_path / "run_summary.json").exists()
    assert fresh.run(fresh.python, "-m", "pip", "show", "ember-plugin-example").stdout.count("0.1.0") == 1


def test_selected_by_name_from_the_cli_and_traced(fresh: FreshEnv, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    out = fresh.run(fresh.bin / "ember", "demo", "--precision", "tf32", "--max-epochs", "1",
                    "--default-root-dir", tmp_path, EMBER_TRACE=str(trace)).stdout
    assert "validation accuracy" in out
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    header = records[0]
    origins = {p["plugin"]: p["from"] for p in header["plugins"]}
    assert origins["precision.tf32"] == "ember-plugin-example 0.1.0"
    assert origins["callback.run-summary"] == "ember-plugin-example 0.1.0"
    setup = next(r for r in records if r.get("hook") == "setup")
    assert "precision.tf32" in [impl["plugin"] for impl in setup["impls"]]
    fit_end = next(r for r in records if r.get("hook") == "on_fit_end")
    assert [impl["plugin"] for impl in fit_end["impls"]] == ["callback.run-summary"]
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary["precision"] == "tf32" and summary["outcome"] == "finished"


def test_the_example_packages_own_tests_pass_with_ember_testing(fresh: FreshEnv) -> None:
    proc = fresh.run(fresh.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=fresh.example)
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b12 passed\b", summary) and "failed" not in summary and "error" not in summary, proc.stdout


def test_nothing_was_installed_into_the_test_environment(fresh: FreshEnv) -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("ember-plugin-example")
