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
from dist_support import once_per_session

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
        # PYTEST_*: an xdist worker's variables would make the nested pytest act as a worker (pytest-benchmark
        # then warns, and the warning is an error)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EMBER_", "PYTHON", "COV_CORE", "PYTEST_")) and k != "VIRTUAL_ENV"}
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
    """Made once per session (the pytest-xdist workers share it: its tests run commands in it, install nothing)."""
    return FreshEnv(once_per_session(tmp_path_factory, "fresh-env", _make_fresh))


def _make_fresh(root: Path) -> None:
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


def test_listed_by_ember_plugins(fresh: FreshEnv) -> None:
    listing = json.loads(fresh.run(fresh.bin / "ember", "plugins", "--json").stdout)
    rows = {row["identity"]: row for row in listing["plugins"]}
    tf32, summary = rows["precision.tf32"], rows["callback.run-summary"]
    assert (tf32["distribution"], tf32["version"], tf32["role"]) == ("ember-plugin-example", "0.1.0", "precision")
    assert (tf32["group"], tf32["status"]) == ("selectable", "available")
    assert [h["name"] for h in tf32["hooks"]] == ["setup", "teardown"]
    # off until asked for (Trainer(run_summary=True)): installing the package changes no run
    assert (summary["group"], summary["status"], summary["distribution"]) == ("selectable", "available",
                                                                             "ember-plugin-example")
    assert {h["name"] for h in summary["hooks"]} == {"add_options", "on_fit_start", "on_fit_end", "on_exception",
                                                     "on_save_checkpoint", "on_load_checkpoint"}
    assert rows["precision.32-true"]["status"] == "active"

    # The same command for a run selecting tf32, and with the run summary blocked (one process).
    out = fresh.python_json("""
        import contextlib, io, json, os
        from ember.cli import main

        def run(*args):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                assert main(["plugins", *args]) == 0
            return buffer.getvalue()

        selected = json.loads(run("--json", "--precision", "tf32"))
        os.environ["EMBER_BLOCK_PLUGINS"] = "callback.run-summary"
        print(json.dumps({"selected": selected, "blocked_text": run()}))
    """)
    statuses = {row["identity"]: row["status"] for row in out["selected"]["plugins"]}
    assert statuses["precision.tf32"] == "active" and statuses["precision.32-true"] == "available"
    line = next(line for line in out["blocked_text"].splitlines() if line.startswith("callback.run-summary"))
    assert line.split()[1] == "blocked" and "ember-plugin-example 0.1.0" in line


FITS = """
    import importlib.metadata, json, os, sys, torch, ember, ember_plugin_example
    from ember.testing import TinyClassifier, tiny_loaders

    class Probe(TinyClassifier):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def training_step(self, batch, batch_idx):
            self.seen.add(torch.get_float32_matmul_precision())
            return super().training_step(batch, batch_idx)

    results = {"files": [ember.__file__, ember_plugin_example.__file__]}
    for name, run in json.loads(os.environ["RUNS"]).items():
        os.environ.pop("EMBER_BLOCK_PLUGINS", None)
        os.environ.update(run.get("env", {}))
        trainer = ember.Trainer(accelerator="cpu", max_epochs=1, num_sanity_val_steps=0,
                                default_root_dir=run["dir"], **run["kwargs"])
        model = Probe()
        trainer.fit(model, *tiny_loaders())
        summary = os.path.join(run["dir"], "run_summary.json")
        results[name] = {
            "precision": trainer.role_identities["precision"],
            "plugin": type(trainer.role_plugins["precision"]).__module__,
            "seen": sorted(model.seen),
            "after": torch.get_float32_matmul_precision(),
            "autoloaded": [identity for identity, _ in trainer.autoload_plugins],
            "extra": [identity for identity, _ in trainer.extra_plugins],
            "summary": json.load(open(summary)) if os.path.exists(summary) else None,
        }
    results["still installed"] = importlib.metadata.version("ember-plugin-example")
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def fits(fresh: FreshEnv, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Four fits in one process of the fresh environment: tf32 selected by name and the run summary switched on
    by its argument; nothing asked for; the run summary asked for but blocked by the Trainer argument, and by the
    environment variable."""
    runs = {
        "tf32": {"kwargs": {"precision": "tf32", "run_summary": True}},
        "not asked for": {"kwargs": {}},
        "blocked by argument": {"kwargs": {"run_summary": True, "block_plugins": ["callback.run-summary"]}},
        "blocked by environment": {"kwargs": {"run_summary": True},
                                   "env": {"EMBER_BLOCK_PLUGINS": "callback.run-summary"}},
    }
    for run in runs.values():
        run["dir"] = str(tmp_path_factory.mktemp("run"))
    return fresh.python_json(FITS, RUNS=json.dumps(runs))


def test_the_installed_copies_are_the_ones_used(fresh: FreshEnv, fits: dict) -> None:
    env_dir = str(fresh.root / "env")
    assert all(path.startswith(env_dir) for path in fits["files"]), fits["files"]


def test_selected_by_name_and_switched_on_by_its_argument(fits: dict) -> None:
    result = fits["tf32"]
    assert result["precision"] == "precision.tf32"
    assert result["plugin"] == "ember_plugin_example.tf32"
    assert result["seen"] == ["high"] and result["after"] == "highest"
    assert result["autoloaded"] == [] and "callback.run-summary" in result["extra"]
    assert result["summary"]["outcome"] == "finished"
    assert result["summary"]["precision"] == "tf32" and result["summary"]["global_step"] == 8


def test_installing_changes_no_run(fits: dict) -> None:
    result = fits["not asked for"]
    assert result["autoloaded"] == [] and "callback.run-summary" not in result["extra"] and result["summary"] is None
    assert result["precision"] == "precision.32-true" and result["seen"] == ["highest"]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_switched_off_by_identity_without_uninstalling(fits: dict, how: str) -> None:
    result = fits[f"blocked by {how}"]
    assert "callback.run-summary" not in result["extra"] and result["summary"] is None
    assert result["precision"] == "precision.32-true" and result["seen"] == ["highest"]
    assert fits["still installed"] == "0.1.0"


@pytest.mark.extended  # selection by name is held in every run by the fits above; this adds the CLI and tracing
def test_selected_by_name_from_the_cli_and_traced(fresh: FreshEnv, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    out = fresh.run(fresh.bin / "ember", "demo", "--precision", "tf32", "--max-epochs", "1",
                    "--default-root-dir", tmp_path, EMBER_TRACE=str(trace)).stdout
    assert "validation accuracy" in out
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    header = records[0]
    origins = {p["plugin"]: p["from"] for p in header["plugins"]}
    assert origins["precision.tf32"] == "ember-plugin-example 0.1.0"
    assert "callback.run-summary" not in origins  # not asked for
    setup = next(r for r in records if r.get("hook") == "setup")
    assert "precision.tf32" in [impl["plugin"] for impl in setup["impls"]]
    assert not (tmp_path / "run_summary.json").exists()


@pytest.mark.extended  # ember.testing in a fresh pytest session is held in every run by tests/test_testing_helpers.py
def test_the_example_packages_own_tests_pass_with_ember_testing(fresh: FreshEnv) -> None:
    proc = fresh.run(fresh.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=fresh.example)
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b14 passed\b", summary) and "failed" not in summary and "error" not in summary, proc.stdout


def test_nothing_was_installed_into_the_test_environment(fresh: FreshEnv) -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("ember-plugin-example")
