"""Run Lightning's own test files, unmodified, on ember: their imports of ``lightning``, ``lightning.pytorch``,
``pytorch_lightning`` and ``lightning.fabric`` are mapped onto ``ember.lightning`` by an import hook, and real
Lightning is never imported (a name ember does not provide fails to import, as it would for a user).

    python scripts/lightning_suite.py --src /work/lightning-src callbacks/test_lambda_function.py trainer/flags

``--src`` is a checkout of Lightning's repository (at least ``tests/tests_pytorch``); the files are paths under
``tests/tests_pytorch`` (a folder means its ``test_*.py``). Each file runs in its own process under a time limit;
the script prints, per file, how many tests passed, failed, errored and were skipped.

Lightning's ``conftest.py`` imports Lightning's private machinery, so it is not loaded: :class:`Fixtures` gives
its fixtures that do not depend on that machinery (the thread check after each test, the environment restored,
faked CUDA/MPS device counts), and :data:`SUPPORT` the few private names its test helpers import that describe the
platform (``_IS_WINDOWS``, version flags, ``RunIf``'s reasons), not Lightning's behaviour.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

ROOTS = {"lightning": "ember.lightning", "pytorch_lightning": "ember.lightning.pytorch",
         "lightning_fabric": "ember.lightning.fabric"}


def _runif_reasons(*, min_cuda_gpus: int = 0, min_torch: str | None = None, max_torch: str | None = None,
                   min_python: str | None = None, bf16_cuda: bool = False, tpu: bool = False,
                   mps: bool | None = None, skip_windows: bool = False, standalone: bool = False,
                   deepspeed: bool = False, dynamo: bool = False, rich: bool = False, omegaconf: bool = False,
                   psutil: bool = False, sklearn: bool = False, onnx: bool = False, linux_only: bool = False,
                   onnxscript: bool = False, tensorrt: bool = False) -> tuple[list[str], dict[str, bool]]:
    """Why a ``RunIf``-marked test cannot run here (Lightning's ``utilities.testing._runif_reasons``)."""
    import torch
    from packaging.version import Version

    reasons = []
    torch_version = Version(torch.__version__.split("+")[0])
    if min_cuda_gpus and torch.cuda.device_count() < min_cuda_gpus:
        reasons.append(f"GPUs>={min_cuda_gpus}")
    if min_torch and torch_version < Version(min_torch):
        reasons.append(f"torch>={min_torch}")
    if max_torch and torch_version >= Version(max_torch):
        reasons.append(f"torch<{max_torch}")
    if min_python and sys.version_info < tuple(int(p) for p in min_python.split(".")):
        reasons.append(f"python>={min_python}")
    if bf16_cuda and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        reasons.append("CUDA bf16")
    mps_available = torch.backends.mps.is_available()
    if mps is not None and mps != mps_available:
        reasons.append("MPS" if mps else "no MPS")
    if linux_only and sys.platform != "linux":
        reasons.append("linux")
    for flag, name in ((tpu, "TPU"), (standalone, "standalone"), (deepspeed, "deepspeed"), (tensorrt, "tensorrt")):
        if flag:
            reasons.append(name)
    for flag, module in ((rich, "rich"), (omegaconf, "omegaconf"), (psutil, "psutil"), (sklearn, "sklearn"),
                         (onnx, "onnx"), (onnxscript, "onnxscript")):
        if flag and importlib.util.find_spec(module) is None:
            reasons.append(module)
    if dynamo and sys.platform == "win32":
        reasons.append("dynamo")
    return reasons, {}


def _flags() -> dict[str, Any]:
    import torch
    from packaging.version import Version

    v = Version(torch.__version__.split("+")[0])
    flags: dict[str, Any] = {"_IS_WINDOWS": sys.platform == "win32", "_IS_INTERACTIVE": False}
    for minor in range(1, 12):
        flags[f"_TORCH_GREATER_EQUAL_2_{minor}"] = v >= Version(f"2.{minor}")
    flags["_PYTHON_GREATER_EQUAL_3_10_0"] = sys.version_info >= (3, 10)
    for name, module in (("_RICH_AVAILABLE", "rich"), ("_OMEGACONF_AVAILABLE", "omegaconf"),
                         ("_TORCHVISION_AVAILABLE", "torchvision"), ("_TORCHMETRICS_GREATER_EQUAL_0_11", "torchmetrics"),
                         ("_PSUTIL_AVAILABLE", "psutil"), ("_SKLEARN_AVAILABLE", "sklearn")):
        flags[name] = importlib.util.find_spec(module) is not None
    return flags


#: Private modules of Lightning's that its test helpers import for facts about the platform: given here, when
#: ember has no module of that name, with only these names.
SUPPORT = {
    "lightning.pytorch.utilities.testing": lambda: {"_runif_reasons": _runif_reasons},
    "lightning.pytorch.utilities.imports": _flags,
    "lightning.fabric.utilities.imports": _flags,
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str | None, names: dict[str, Any] | None = None) -> None:
        self.target, self.names = target, names

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is not None:
            return importlib.import_module(self.target)
        module = types.ModuleType(spec.name, "a stand-in of the lightning_suite harness")
        module.__path__ = []  # a package, so that the stand-ins below it import
        module.__dict__.update(self.names or {})
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class LightningToEmber(importlib.abc.MetaPathFinder):
    """Imports of Lightning's module paths give ember.lightning's module of the same path; Lightning itself is
    never imported (what ember lacks raises ``ModuleNotFoundError``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        head, _, tail = fullname.partition(".")
        if head not in ROOTS:
            return None
        twin = ROOTS[head] + ("." + tail if tail else "")
        if head == "lightning" and tail.startswith("fabric"):
            twin = "ember.lightning." + tail
        try:
            found = importlib.util.find_spec(twin)
        except ModuleNotFoundError:
            found = None
        if found is not None:
            return importlib.machinery.ModuleSpec(fullname, _Alias(twin), is_package=found.submodule_search_locations
                                                  is not None)
        if fullname in SUPPORT:
            return importlib.machinery.ModuleSpec(fullname, _Alias(None, SUPPORT[fullname]()), is_package=True)
        if any(name.startswith(fullname + ".") for name in SUPPORT):
            return importlib.machinery.ModuleSpec(fullname, _Alias(None), is_package=True)
        raise ModuleNotFoundError(f"ember.lightning has no {twin} (for {fullname})", name=fullname)


# -- the fixtures of Lightning's conftest that do not use its private machinery ----------------------------------
class Fixtures:
    @pytest.fixture(scope="session")
    def datadir(self) -> Path:
        return Path(os.environ["LIGHTNING_SUITE_SRC"]) / "Datasets"

    @pytest.fixture(autouse=True)
    def restore_env_variables(self) -> Any:
        env = os.environ.copy()
        yield
        os.environ.clear()
        os.environ.update(env)

    @pytest.fixture(autouse=True)
    def reset_deterministic_algorithm(self) -> Any:
        import torch

        yield
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        torch.use_deterministic_algorithms(False)

    @pytest.fixture(autouse=True)
    def thread_police_duuu_daaa_duuu_daaa(self) -> Any:
        """Lightning's check: a test may leave no thread behind (those it knows of are stopped or joined)."""
        before = set(threading.enumerate())
        yield
        for thread in set(threading.enumerate()) - before:
            stop = getattr(thread, "stop", None) or getattr(thread, "exit", None)
            if thread.daemon and callable(stop):
                stop()
                assert not thread.is_alive()
            elif thread.name in ("QueueFeederThread", "QueueManagerThread", "InductorSubproc") \
                    or "(_read_thread)" in thread.name or "ThreadPoolExecutor-" in thread.name:
                thread.join(timeout=20)
            elif type(thread).__name__ == "TMonitor":
                thread.exit()  # type: ignore[attr-defined]
            elif thread.name == "fsspecIO":
                continue
            else:
                raise AssertionError(f"Test left zombie thread: {thread}")

    def _count(self, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
        import torch

        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)

    @pytest.fixture
    def cuda_count_0(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._count(monkeypatch, 0)

    @pytest.fixture
    def cuda_count_1(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._count(monkeypatch, 1)

    @pytest.fixture
    def cuda_count_2(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._count(monkeypatch, 2)

    @pytest.fixture
    def cuda_count_4(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._count(monkeypatch, 4)

    @pytest.fixture
    def mps_count_0(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)

    @pytest.fixture
    def mps_count_1(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)


class Counter:
    """Counts outcomes per test: a test fails if any of its phases fails (setup errors count as errors)."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        now = self.outcome.get(report.nodeid, "passed")
        if report.skipped and report.when in ("setup", "call"):
            now = "skipped"
        elif report.failed:
            now = "failed" if report.when == "call" else ("error" if now == "passed" else now)
        self.outcome[report.nodeid] = now

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(str(report.longrepr).strip().splitlines()[-1][:200])


def run_one(src: Path, test_file: str, out: Path) -> int:
    """Run one file in this process with the import hook installed; write its counts to ``out``."""
    os.environ["LIGHTNING_SUITE_SRC"] = str(src)
    sys.meta_path.insert(0, LightningToEmber())
    sys.path.insert(0, str(src / "tests"))
    counter = Counter()
    args = [str(src / "tests" / "tests_pytorch" / test_file), "-q", "--noconftest", "-p", "no:cacheprovider",
            "-p", "no:randomly", "--rootdir", str(src / "tests"), "-W", "error::FutureWarning",
            "--disable-pytest-warnings", "-o", "addopts=", "--tb=line"]
    code = pytest.main(args, plugins=[Fixtures(), counter])
    ember_dir = str(Path(importlib.import_module("ember").__file__ or "").parent)
    leaked = [m for m, mod in list(sys.modules.items()) if m.split(".")[0] in ROOTS
              and not (getattr(mod, "__file__", None) or ember_dir).startswith(ember_dir)]
    assert not leaked, f"real Lightning was imported: {leaked}"
    counts = {k: sum(1 for v in counter.outcome.values() if v == k) for k in ("passed", "failed", "error", "skipped")}
    out.write_text(json.dumps({**counts, "collect_errors": counter.collect_errors}))
    return int(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="paths under tests/tests_pytorch (files or folders)")
    parser.add_argument("--src", type=Path, required=True, help="a checkout of Lightning's repository")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed per file")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        sys.exit(run_one(args.src.resolve(), args.files[0], args.one))
    root = args.src.resolve() / "tests" / "tests_pytorch"
    files: list[str] = []
    for name in args.files:
        path = root / name
        found = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        files += [str(p.relative_to(root)) for p in found]
    total = dict.fromkeys(("passed", "failed", "error", "skipped"), 0)
    print(f"{'file':60} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5}  seconds")
    for name in files:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "counts.json"
            start = time.perf_counter()
            try:
                subprocess.run([sys.executable, __file__, "--src", str(args.src), "--one", str(out), name],
                               cwd=tmp, timeout=args.timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                print(f"{name:60} timed out after {args.timeout:.0f} s")
                continue
            took = time.perf_counter() - start
            if not out.exists():
                print(f"{name:60} did not run")
                continue
            counts = json.loads(out.read_text())
        for key in total:
            total[key] += counts[key]
        print(f"{name:60} {counts['passed']:5} {counts['failed']:5} {counts['error']:5} {counts['skipped']:5}  "
              f"{took:7.1f}")
        for error in counts["collect_errors"]:
            print(f"    not collected: {error}")
    print(f"{'total':60} {total['passed']:5} {total['failed']:5} {total['error']:5} {total['skipped']:5}")


if __name__ == "__main__":
    main()
