"""Run Lightning's own test files, unmodified, on ember and on Lightning, and compare.

On ember, the tests' imports of ``lightning``, ``lightning.pytorch``, ``pytorch_lightning`` and ``lightning.fabric``
are mapped onto ``ember.lightning`` by an import hook, and real Lightning is never imported (a name ember does not
provide fails to import, as it would for a user; the run asserts that no module of Lightning's was loaded). On
Lightning (``--framework lightning``, run with an interpreter that has Lightning installed), the files run as
Lightning's CI runs them, with its own ``conftest.py``; ``--record`` keeps each test's outcome in a JSON fixture, so
that the ember side is compared without running Lightning again:

    # once, in an environment with Lightning 2.6 (bash scripts/dev.sh lightning-suite record does this)
    python scripts/lightning_suite.py --framework lightning --src SRC --record tests/lightning/suite.json
    # then, in ember's environment: per file, the tests that pass on Lightning and how many of them pass on ember,
    # and each failing one's cause, sorted into "asserts a Lightning internal" and "behaviour differs"
    python scripts/lightning_suite.py --src SRC --against tests/lightning/suite.json --report suite.md

``--src`` is a checkout of Lightning's repository at the release the fixture names (at least
``tests/tests_pytorch``); the files are paths under ``tests/tests_pytorch`` (a folder means its ``test_*.py``), by
default :data:`FILES`. Each file runs in its own process under a time limit; a file that runs out of time keeps the
outcomes of the tests that finished.

Lightning's ``conftest.py`` imports Lightning's private machinery, so on ember it is not loaded: :class:`Fixtures`
gives its fixtures that do not depend on that machinery (the thread check after each test, the environment restored,
faked CUDA/MPS device counts), and :data:`SUPPORT` the few private names its test helpers import that describe the
platform (``_IS_WINDOWS``, version flags, ``RunIf``'s reasons), not Lightning's behaviour.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

#: The files the suite is measured on (issue 27): paths under ``tests/tests_pytorch``.
FILES = (
    "trainer/logging_", "trainer/optimization", "trainer/flags", "trainer/test_trainer.py",
    "trainer/test_dataloaders.py", "core/test_lightning_module.py", "core/test_datamodules.py",
    "core/test_lightning_optimizer.py", "callbacks/test_early_stopping.py", "callbacks/test_lr_monitor.py",
    "callbacks/test_timer.py", "callbacks/progress/test_tqdm_progress_bar.py", "checkpointing/test_model_checkpoint.py",
    "models/test_hooks.py", "models/test_hparams.py", "loops/test_training_loop.py", "loops/test_evaluation_loop.py",
    "loggers/test_csv.py", "loggers/test_tensorboard.py",
)
#: The Lightning release whose tests the fixture records (``--src`` should be a checkout of this tag).
LIGHTNING_TAG = "2.6.5"

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
#: Lightning's private packages (its loops, the trainer's connectors, its launchers and wrappers) and Lightning
#: Fabric, which ember does not provide. A test file that imports a name from them at its top gets a stand-in
#: (:func:`_stand_in`), so that its other tests run; a test that uses the stand-in fails with a message that names
#: it. The same goes for a ``_``-name that a test imports from a module ember does have.
PRIVATE_PACKAGES = ("lightning.pytorch.loops", "lightning.pytorch.trainer.connectors", "lightning.pytorch.overrides",
                    "lightning.pytorch.strategies.launchers", "lightning.fabric")


class NotInEmber(AttributeError):
    """Raised when a test uses a stand-in for a name ember does not provide (see :data:`PRIVATE_PACKAGES`)."""


def _why(module: str, name: str) -> str:
    module = re.sub(r"^pytorch_lightning\b", "lightning.pytorch", module)
    if name.startswith("_") or any(part.startswith("_") for part in module.split(".")) or \
            module.startswith(PRIVATE_PACKAGES[:-1]):
        return f"{module}.{name} is Lightning's private machinery, which ember does not provide"
    return f"{module}.{name} is not provided by ember (Lightning Fabric is not part of ember)"


def _flag(name: str) -> Any:
    """A version or availability flag (``_TORCHMETRICS_GREATER_EQUAL_0_11``, ``_TENSORBOARD_AVAILABLE``) from the
    installed packages, or None when ``name`` is not one."""
    from packaging.version import Version

    known = _flags()
    if name in known:
        return known[name]
    if m := re.fullmatch(r"_([A-Z0-9]+)_AVAILABLE", name):
        return importlib.util.find_spec(m.group(1).lower()) is not None
    if m := re.fullmatch(r"_([A-Z0-9]+)_GREATER_EQUAL_(\d+(?:_\d+)*)", name):
        try:
            have = importlib.metadata.version(m.group(1).lower())
        except importlib.metadata.PackageNotFoundError:
            return False
        return Version(have) >= Version(m.group(2).replace("_", "."))
    return None


def _stand_in(module: str, name: str) -> Any:
    """A class standing in for ``module.name``: it can be imported and subclassed; using it raises
    :class:`NotInEmber`."""
    flag = _flag(name)
    if flag is not None:
        return flag
    why = _why(module, name)

    class _Missing(type):
        def __getattr__(cls, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            raise NotInEmber(why)

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            raise NotInEmber(why)

    return _Missing(name, (), {"__module__": module, "__doc__": why})


def _module_getattr(module: types.ModuleType, fallback: Any, twin: str, everything: bool = False) -> Any:
    """A module ``__getattr__`` giving stand-ins for ``_``-names (for every name where ``everything``)."""

    def __getattr__(name: str) -> Any:
        if fallback is not None:
            try:
                return fallback(name)
            except AttributeError:
                pass
        if (everything or name.startswith("_")) and not name.startswith("__"):
            return _stand_in(twin, name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
    return __getattr__


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str | None, names: dict[str, Any] | None = None, private: bool = False) -> None:
        self.target, self.names, self.private = target, names, private

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is not None:
            module = importlib.import_module(self.target)
            # a ``_``-name that a test imports from ember's module is a stand-in (Lightning's private helpers)
            if not getattr(module, "_lightning_suite_getattr", False):
                module.__dict__["__getattr__"] = _module_getattr(module, module.__dict__.get("__getattr__"),
                                                                 spec.name)
                module.__dict__["_lightning_suite_getattr"] = True
            canonical = re.sub(r"^pytorch_lightning\b", "lightning.pytorch", spec.name)
            if not hasattr(module, "__path__") and any(p.startswith(canonical + ".") for p in PRIVATE_PACKAGES):
                # a module of ember's where Lightning has a package with private ones below it
                # (``strategies.launchers``): importable as a package, so that those get their stand-ins
                module.__dict__["__path__"] = []
            return module
        module = types.ModuleType(spec.name, "a stand-in of the lightning_suite harness")
        module.__path__ = []  # a package, so that the stand-ins below it import
        module.__dict__.update(self.names or {})
        module.__dict__["__getattr__"] = _module_getattr(module, None, spec.name, everything=self.private)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class LightningToEmber(importlib.abc.MetaPathFinder):
    """Imports of Lightning's module paths give ember.lightning's module of the same path; Lightning itself is
    never imported (what ember lacks raises ``ModuleNotFoundError``, but for the stand-ins of
    :data:`PRIVATE_PACKAGES`)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        head, _, tail = fullname.partition(".")
        if head not in ROOTS:
            return None
        twin = ROOTS[head] + ("." + tail if tail else "")
        if head == "lightning" and tail.startswith("fabric"):
            twin = "ember.lightning." + tail
        canonical = "lightning." + ("fabric" + twin.removeprefix("ember.lightning.fabric")
                                    if twin.startswith("ember.lightning.fabric")
                                    else twin.removeprefix("ember.lightning.").replace("ember.lightning", "lightning"))
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
        if canonical.startswith(PRIVATE_PACKAGES) or any(p.startswith("_") for p in canonical.split(".")):
            return importlib.machinery.ModuleSpec(fullname, _Alias(None, private=True), is_package=True)
        raise ModuleNotFoundError(f"ember.lightning has no {twin} (for {fullname})", name=fullname)


# -- the fixtures of Lightning's conftest that do not use its private machinery ----------------------------------
class Fixtures:
    @pytest.fixture(scope="session")
    def datadir(self) -> Path:
        return Path(os.environ["LIGHTNING_SUITE_SRC"]) / "Datasets"

    @pytest.fixture
    def tmpdir_server(self, tmp_path: Path) -> Any:
        """Lightning's: an HTTP server of ``tmp_path`` on a free port (checkpoints loaded from a URL)."""
        import functools
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
        with ThreadingHTTPServer(("localhost", 0), handler) as server:
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            yield server.server_address
            server.shutdown()
            thread.join(timeout=20)

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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """A ``KeyboardInterrupt`` that leaves a test fails that test instead of ending the session: ember re-raises
        Ctrl-C after stopping a fit at a safe point, where Lightning ends the fit and returns."""
        try:
            return (yield)
        except KeyboardInterrupt as exc:
            raise AssertionError("KeyboardInterrupt left the fit: ember re-raises Ctrl-C after stopping at a safe "
                                 "point (Lightning returns from fit)") from exc

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
    """Each test's outcome (a test fails if any of its phases fails; setup and teardown failures are errors), with
    the exception's message and the lines of Lightning's test files in its traceback, written to ``out`` after
    every test so that a file that runs out of time keeps what finished."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tests: dict[str, dict[str, str]] = {}
        self.collect_errors: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.setdefault(report.nodeid.split("::", 1)[-1], {"outcome": "passed"})
        if report.skipped and report.when in ("setup", "call"):
            test["outcome"] = "skipped"
        elif report.failed and test["outcome"] in ("passed", "skipped"):
            test["outcome"] = "failed" if report.when == "call" else "error"
            test["message"], test["lines"] = _crash(report)
        if report.when == "teardown":
            self.write()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(_crash(report)[0])
            self.write()

    def write(self) -> None:
        self.out.write_text(json.dumps({"tests": self.tests, "collect_errors": self.collect_errors}))


def _crash(report: pytest.TestReport | pytest.CollectReport) -> tuple[str, str]:
    """The exception's message and the source lines of Lightning's test files that its traceback passes."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(longrepr).strip().splitlines()[-1]
    message = message[4:] if message.startswith("E   ") else message
    lines = []
    for entry in getattr(getattr(longrepr, "reprtraceback", None), "reprentries", []):
        where = getattr(entry, "reprfileloc", None)
        if where is not None and "tests_pytorch" in str(where.path):
            lines += [line.strip() for line in getattr(entry, "lines", []) if line.strip().startswith((">", "@"))
                      or not line.startswith("E")]
    return message[:600], "\n".join(lines)[-1500:]


def run_one(src: Path, test_file: str, out: Path, framework: str) -> int:
    """Run one file in this process (on ember with the import hook installed); write its outcomes to ``out``."""
    os.environ["LIGHTNING_SUITE_SRC"] = str(src)
    sys.path.insert(0, str(src / "tests"))
    counter = Counter(out)
    args = [str(src / "tests" / "tests_pytorch" / test_file), "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(src / "tests"), "--disable-pytest-warnings", "-o", "addopts=", "--tb=short",
            "-p", "no:xdist", "-p", "no:cov"]
    plugins: list[object] = [counter]
    if framework == "ember":
        os.environ[_MAPPED_ENV] = "1"  # for the processes a test starts (see the end of this file)
        sys.meta_path.insert(0, LightningToEmber())
        args += ["--noconftest", "-W", "error::FutureWarning"]
        plugins.append(Fixtures())
    counter.write()
    code = pytest.main(args, plugins=plugins)
    if framework == "ember":
        ember_dir = str(Path(importlib.import_module("ember").__file__ or "").parent)
        leaked = [m for m, mod in list(sys.modules.items()) if m.split(".")[0] in ROOTS
                  and not (getattr(mod, "__file__", None) or ember_dir).startswith(ember_dir)]
        assert not leaked, f"real Lightning was imported: {leaked}"
    counter.write()
    return int(code)


# -- sorting a failure by its cause ------------------------------------------------------------------------------
#: What marks a failure as asserting Lightning's private machinery, in its message or in the test's own lines: the
#: loop and connector objects, ``_``-names of Lightning's objects, Lightning's private modules, and
#: ``trainer.strategy.connect(model)``, with which a test starts driving the trainer's connectors by hand, and the
#: helpers of Lightning's conftest that fake devices by patching Lightning's accelerator modules.
INTERNAL = re.compile(
    r"\b(fit_loop|epoch_loop|validate_loop|test_loop|predict_loop|_evaluation_loop|_logger_connector|"
    r"_accelerator_connector|_checkpoint_connector|_callback_connector|_data_connector|_signal_connector|"
    r"connectors|_results|_active_loop|batch_progress|epoch_progress|optim_progress|_run_stage|_run\b|"
    r"_call_\w+|_LRScheduler\w*|_FxValidator|_ResultCollection|_Metadata|_ResultMetric|_TrainingEpochLoop|_\w+Loop|"
    r"_\w+Connector|_SubprocessScriptLauncher|_lightning_module|_fabric\w*|_module_mode|_get_\w+|_xla\w*|"
    r"_TORCH\w+|_datamodule\w*|_should_\w+|_is_\w+|_check_\w+)\b"
    r"|lightning\.(pytorch|fabric)\.(loops|trainer\.connectors|core\.saving|utilities\._|\w+\._)"
    r"|strategy\.connect\(|\bmock_(cuda_count|mps_count|xla_available|tpu_available)\b|\.loops\b|has no attribute '_|have the attribute '_|ember\.lightning has no [\w.]*\._|Lightning's private machinery")
#: A private attribute (``timer._duration``) read on the line of a test where it failed.
PRIVATE_ATTRIBUTE = re.compile(r"\._(?!_)[A-Za-z]\w*")
#: Short labels for the common messages of "behaviour differs", in order: the first that matches names the cause.
KINDS = (
    ("missing name", re.compile(r"ImportError|ModuleNotFoundError|cannot import name|has no attribute")),
    ("argument ember lacks", re.compile(r"unexpected keyword argument|takes \d+ positional|missing \d+ required")),
    ("warning ember does not give", re.compile(r"DID NOT WARN|No warnings of type")),
    ("error ember does not raise", re.compile(r"DID NOT RAISE")),
    ("different error message", re.compile(r"Regex pattern did not match|does not match")),
    ("thread left running", re.compile(r"zombie thread")),
    ("mock call differs", re.compile(r"expected call|Calls not found|call_count|assert_called|mock")),
)


def _cause(test: dict[str, str] | None, why_not_run: str) -> tuple[str, str]:
    """("internal" | "differs", a short cause) of a test that passes on Lightning and not on ember."""
    if test is None:
        return "differs", why_not_run
    message = test.get("message", test["outcome"])
    if test["outcome"] == "skipped":
        return "differs", "skipped on ember: " + message
    first = message.splitlines()[0] if message else ""
    failing = [line for line in test.get("lines", "").splitlines() if line.startswith(">")]
    if INTERNAL.search(first) or INTERNAL.search(test.get("lines", "")) or PRIVATE_ATTRIBUTE.search("\n".join(failing)):
        return "internal", first
    return "differs", first


def _group(message: str) -> str:
    """A message with its numbers, paths and object addresses taken out, to count messages of one kind."""
    message = re.sub(r"0x[0-9a-f]+", "0x…", message)
    message = re.sub(r"(/[\w.\-=]+)+", "PATH", message)
    message = re.sub(r"\d+(\.\d+)?", "N", message)
    return message[:160]


#: Class names that appear in parametrized test ids: a test parametrized with ``LightningModule`` is named after
#: ember's class on ember (``test_x[LightningModule]`` is ``test_x[Module]`` there).
_ID_NAMES = (("LightningDataModule", "DataModule"), ("LightningModule", "Module"))


def _same_test(tests: dict[str, Any], test: str) -> Any:
    """Lightning's test ``test`` among ember's outcomes ``tests``, matching ids that name ember's classes."""
    if test in tests or "[" not in test:
        return tests.get(test)
    name, _, params = test.partition("[")
    for lightning, ember in _ID_NAMES:
        params = params.replace(lightning, ember)
    return tests.get(f"{name}[{params}")


def compare(record: dict[str, Any], ember: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per file: the tests passing on Lightning, those of them passing on ember, and each failing one's cause."""
    rows = []
    for name, lightning in record["files"].items():
        passing = sorted(t for t, r in lightning["tests"].items() if r["outcome"] == "passed")
        got = ember.get(name)
        if got is None:
            why = "not run"
        elif got.get("timed_out"):
            why = "not reached: the file ran out of time"
        elif got["collect_errors"]:
            why = "the file did not import: " + got["collect_errors"][0].splitlines()[0]
        else:
            why = "not collected on ember"
        failing = {}
        for test in passing:
            result = _same_test((got or {}).get("tests", {}), test)
            if result is not None and result["outcome"] == "passed":
                continue
            failing[test] = _cause(result, why)
        rows.append({"file": name, "lightning": len(passing), "ember": len(passing) - len(failing),
                     "internal": sum(1 for kind, _ in failing.values() if kind == "internal"), "failing": failing})
    return rows, []


def table(rows: list[dict[str, Any]], record: dict[str, Any]) -> str:
    """The markdown report: the per-file table, then the causes of "behaviour differs" by count, then every
    failing test with its cause."""
    out = [f"Lightning {record['lightning']} (tests of {record['tag']}) and ember, torch {record['torch']}, CPU.", "",
           "| file | pass on Lightning | pass on ember | % | fail: Lightning internal | fail: behaviour differs |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    total = dict.fromkeys(("lightning", "ember", "internal"), 0)
    for row in rows:
        differs = row["lightning"] - row["ember"] - row["internal"]
        pct = 100 * row["ember"] / row["lightning"] if row["lightning"] else 100.0
        out.append(f"| {row['file']} | {row['lightning']} | {row['ember']} | {pct:.0f} | {row['internal']} | "
                   f"{differs} |")
        for key in total:
            total[key] += row[key]
    pct = 100 * total["ember"] / total["lightning"] if total["lightning"] else 100.0
    out.append(f"| **total** | **{total['lightning']}** | **{total['ember']}** | **{pct:.1f}** | "
               f"**{total['internal']}** | **{total['lightning'] - total['ember'] - total['internal']}** |")
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        for kind, cause in row["failing"].values():
            label = next((label for label, pattern in KINDS if pattern.search(cause)), "other")
            key = (kind, f"{label}: {_group(cause)}" if kind == "differs" else _group(cause))
            counts[key] = counts.get(key, 0) + 1
    for kind, title in (("differs", "Behaviour differs"), ("internal", "Asserts a Lightning internal")):
        out += ["", f"### {title}: causes by count", ""]
        for (k, cause), n in sorted(counts.items(), key=lambda kv: -kv[1]):
            if k == kind:
                out.append(f"- {n} × `{cause}`")
    out += ["", "### Every failing test", ""]
    for row in rows:
        for test, (kind, cause) in sorted(row["failing"].items()):
            out.append(f"- `{row['file']}::{test}` ({kind}): {cause[:200]}")
    return "\n".join(out) + "\n"


def _expand(root: Path, names: list[str]) -> list[str]:
    files: list[str] = []
    for name in names:
        path = root / name
        found = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        files += [str(p.relative_to(root)) for p in found]
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="paths under tests/tests_pytorch (files or folders); by default "
                        "the record's files, or FILES")
    parser.add_argument("--src", type=Path, required=True, help="a checkout of Lightning's repository")
    parser.add_argument("--framework", choices=("ember", "lightning"), default="ember")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs each file")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per file")
    parser.add_argument("--record", type=Path, help="write every test's outcome to this JSON fixture (Lightning)")
    parser.add_argument("--against", type=Path, help="a fixture of --record to compare the ember run with")
    parser.add_argument("--report", type=Path, help="write the comparison table (markdown) here")
    parser.add_argument("--results", type=Path, help="write the per-test outcomes of this run here (JSON)")
    parser.add_argument("--load", type=Path, help="compare the outcomes of an earlier --results instead of running")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        sys.exit(run_one(args.src.resolve(), args.files[0], args.one, args.framework))
    root = args.src.resolve() / "tests" / "tests_pytorch"
    record = json.loads(args.against.read_text()) if args.against else None
    names = args.files or (list(record["files"]) if record else list(FILES))
    files = _expand(root, names)
    results: dict[str, dict[str, Any]] = json.loads(args.load.read_text()) if args.load else {}
    if args.load:
        files = [name for name in files if name in results]
    print(f"{'file':60} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5}  seconds", flush=True)
    for name in [] if args.load else files:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "outcomes.json"
            start = time.perf_counter()
            timed_out = False
            try:
                subprocess.run([args.python, __file__, "--src", str(args.src.resolve()), "--framework",
                                args.framework, "--one", str(out), name],
                               cwd=tmp, timeout=args.timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                timed_out = True
            took = time.perf_counter() - start
            if not out.exists():
                print(f"{name:60} did not run", flush=True)
                continue
            found = json.loads(out.read_text())
        found["timed_out"] = timed_out
        results[name] = found
        counts = {k: sum(1 for t in found["tests"].values() if t["outcome"] == k)
                  for k in ("passed", "failed", "error", "skipped")}
        print(f"{name:60} {counts['passed']:5} {counts['failed']:5} {counts['error']:5} {counts['skipped']:5}  "
              f"{took:7.1f}{'  (timed out)' if timed_out else ''}", flush=True)
        for error in found["collect_errors"]:
            print(f"    not collected: {error.splitlines()[0][:200]}", flush=True)
        if args.results:  # after every file, so that a long run can be read while it goes on
            args.results.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.record:
        versions = subprocess.run([args.python, "-c", "import lightning, torch; print(lightning.__version__, "
                                   "torch.__version__)"], capture_output=True, text=True, check=True).stdout.split()
        old = json.loads(args.record.read_text())["files"] if args.record.exists() else {}
        kept = {n: {"tests": {t: {"outcome": r["outcome"]} for t, r in found["tests"].items()},
                    "collect_errors": found["collect_errors"], "timed_out": found["timed_out"]}
                for n, found in results.items()}
        args.record.write_text(json.dumps({"tag": LIGHTNING_TAG, "lightning": versions[0], "torch": versions[1],
                                           "files": dict(sorted({**old, **kept}.items()))}, indent=1) + "\n")
    if record is not None:
        record = {**record, "files": {n: f for n, f in record["files"].items() if n in files}}
        rows, _ = compare(record, results)
        report = table(rows, record)
        print(report.split("\n### Every failing test")[0])
        if args.report:
            args.report.write_text(report)


#: Set in a process that runs a file on ember: the processes its tests start map the imports too.
_MAPPED_ENV = "LIGHTNING_SUITE_ON_EMBER"

if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__" and os.environ.get(_MAPPED_ENV) == "1":
    # A process started by the spawn start method from a test (``strategy="ddp_spawn"``) runs this file first, as
    # its parent's main module; the test's objects it then unpickles import Lightning's names, mapped here as in
    # the test's own process.
    sys.meta_path.insert(0, LightningToEmber())
