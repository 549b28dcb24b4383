"""Suite-wide fixtures."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

#: Signals whose handlers ember installs and puts back (interrupts, SLURM's requeue warning).
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2") if hasattr(signal, name))


def _torch_modes() -> dict[str, tuple[Any, Callable[[Any], None]]]:
    """Process-wide torch settings: name -> (current value, how to set it back)."""
    modes: dict[str, tuple[Any, Callable[[Any], None]]] = {
        "torch.are_deterministic_algorithms_enabled()": (
            (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        "torch.is_anomaly_enabled()": (
            (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1])),
        "torch.get_default_dtype()": (torch.get_default_dtype(), torch.set_default_dtype),
        "torch.is_grad_enabled()": (torch.is_grad_enabled(), torch.set_grad_enabled),
        "torch.get_float32_matmul_precision()": (torch.get_float32_matmul_precision(),
                                                 torch.set_float32_matmul_precision),
        "torch.backends.cudnn.benchmark": (torch.backends.cudnn.benchmark,
                                           lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
        "torch.get_num_threads()": (torch.get_num_threads(), torch.set_num_threads),
    }
    if hasattr(torch, "get_default_device"):  # torch >= 2.3
        modes["torch.get_default_device()"] = (torch.get_default_device(), torch.set_default_device)
    return modes


#: What ember sets for the whole process on purpose, as Lightning does (``deterministic=``, ``benchmark=``,
#: ``seed_everything``'s variables, and the process group and error-recording excepthook of a launched run,
#: kept until exit): put back after each test without failing it.
_PROCESS_WIDE_BY_DESIGN = {"torch.are_deterministic_algorithms_enabled()", "torch.backends.cudnn.benchmark",
                           "env CUBLAS_WORKSPACE_CONFIG", "env EMBER_GLOBAL_SEED", "env EMBER_SEED_WORKERS",
                           "env PL_GLOBAL_SEED", "env PL_SEED_WORKERS", "a torch.distributed process group", "sys.excepthook"}
#: Set by pytest itself around each phase, and by torch's compiler for the process on first use.
_PYTEST_ENV = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
#: Variables libraries keep for the process once used (torch's compiler; torch 2.4's CUDA module loading; a wandb
#: service); and entries under site-packages on sys.path are libraries' own vendoring: neither is a test's leak.
_LIBRARY_ENV_PREFIXES = ("TORCHINDUCTOR_", "_TORCHINDUCTOR_", "TRITON_", "WANDB_", "CUDA_MODULE_LOADING",
                         "_MLFLOW_TELEMETRY_")


class _Snapshot:
    """The process-wide state a test could leak into the tests after it."""

    def __init__(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if k not in _PYTEST_ENV}
        self.cwd = os.getcwd()
        self.torch = _torch_modes()
        self.handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        self.excepthook = sys.excepthook
        self.path = list(sys.path)
        self.process_group = _process_group()

    def restore(self) -> list[str]:
        """Put everything back; return what had changed."""
        leaks: list[str] = []
        env = {k: v for k, v in os.environ.items() if k not in _PYTEST_ENV}
        for name in sorted(env.keys() | self.env.keys()):
            if env.get(name) != self.env.get(name) and not name.startswith(_LIBRARY_ENV_PREFIXES):
                leaks.append(f"env {name}")
                if name in self.env:
                    os.environ[name] = self.env[name]
                else:
                    del os.environ[name]
        if os.getcwd() != self.cwd:
            leaks.append(f"cwd {os.getcwd()}")
            os.chdir(self.cwd)
        for name, (before, put_back) in self.torch.items():
            if _torch_modes()[name][0] != before:
                leaks.append(f"{name} = {_torch_modes()[name][0]!r} (was {before!r})")
                put_back(before)
        for sig, handler in self.handlers.items():
            if signal.getsignal(sig) is not handler:
                leaks.append(f"signal handler of {signal.Signals(sig).name}")
                signal.signal(sig, handler)
        if sys.excepthook is not self.excepthook:
            leaks.append("sys.excepthook")
            sys.excepthook = self.excepthook
        # (sys.meta_path is not compared: importing importlib_metadata, say, adds its finder there for good)
        if [p for p in sys.path if "site-packages" not in p] != [p for p in self.path if "site-packages" not in p]:
            leaks.append(f"sys.path entries {[p for p in sys.path if p not in self.path]!r}")
            sys.path[:] = self.path
        if _process_group() and not self.process_group:
            leaks.append("a torch.distributed process group")
            torch.distributed.destroy_process_group()
        return leaks


def _process_group() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


@pytest.fixture(autouse=True)
def _no_leaks_into_the_next_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that leaves the process changed for the tests after it: environment variables, the working
    directory, torch's global modes (deterministic algorithms, anomaly detection, default dtype, grad mode,
    matmul precision, threads, default device), signal handlers, ``sys.excepthook`` and ``sys.path`` (how fake
    plugin distributions are registered). Whatever changed is put back either way, and a
    process group left initialized is destroyed (it would change how the next test evaluates).

    Requests no other fixture, so it is set up before and torn down after every fixture of the test (including
    ``monkeypatch``, whose changes are undone by then)."""
    snapshot = _Snapshot()
    yield
    leaks = [leak for leak in snapshot.restore() if leak.split(" = ")[0] not in _PROCESS_WIDE_BY_DESIGN]
    if leaks:
        pytest.fail(f"{request.node.nodeid} left the process changed for the tests after it (now put back): "
                    f"{'; '.join(leaks)}. Undo such changes in the test: monkeypatch, a fixture, or try/finally.",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _ember_defaults() -> Iterator[None]:
    """Every test starts with ember's own default plugins: taking ``Trainer`` through Lightning's names (a test
    module's ``from ember.lightning.pytorch import Trainer``) makes Lightning's progress bar the process's default
    (ember.lightning._names.lightning_trainer), which a test that wants it asks for in its own body."""
    from ember.core.hooks import options

    options.substitute("progress.tqdm", None)
    yield
    options.substitute("progress.tqdm", None)


@pytest.fixture(autouse=True)
def _run_in_a_temporary_directory(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own empty working directory, so runs that write to the default root
    (logs, checkpoints) never touch the checkout and never see another test's files."""
    monkeypatch.chdir(tmp_path)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--extended", action="store_true",
                     help="also run the tests marked 'extended' (left out by default: see docs/install.md)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``extended`` are left out (reported as deselected) unless ``--extended`` is given or a ``-m``
    expression names the marker: each widens or repeats a behaviour that a test of the default run holds too.

    Tests marked ``slow`` go first, each group keeping the order it has (pytest-randomly's shuffle, when on).
    pytest-xdist's worksteal hands each worker a contiguous part of the list, so the long tests start early on one
    worker while the other runs the short ones, and stealing evens out the end; not with --dist load or
    loadgroup, which start them all at once on every worker."""
    if not config.getoption("extended") and "extended" not in (config.option.markexpr or ""):
        left_out = [item for item in items if item.get_closest_marker("extended") is not None]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.get_closest_marker("extended") is None]
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def warm_python() -> Iterator[Any]:
    """One warm interpreter per test process (torch, ember and LightningCLI's modules imported once), forked for
    each short command a test runs: see tests/warm.py. ``torch._dynamo`` too: torch imports it at the first
    optimizer a process makes (``Optimizer.add_param_group`` is wrapped to disable it), about as much CPU again as
    importing torch, and every command that trains makes one."""
    from warm import Warm

    interpreter = Warm(preload=("torch", "ember", "ember.cli", "ember.lightning.pytorch.cli", "jsonargparse",
                                "torch._dynamo"))
    yield interpreter
    interpreter.close()
