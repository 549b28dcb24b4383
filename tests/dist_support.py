"""Running multi-process jobs from the tests: real processes, a clean environment, a hard time limit.

Every job starts in its own session, so on a timeout the whole process group (launcher and workers) is
killed and nothing is left behind.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parent / "multiprocess"


@functools.lru_cache(maxsize=1)
def fsdp_available() -> bool:
    """strategy.fsdp (and its sharded checkpoints) needs torch >= 2.6, where ``fully_shard`` is public, and on the
    CPU, where the tests run it, torch >= 2.7 and a gloo that averages (a 2-process probe, run once)."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return False
    from ember.plugins.strategies.fsdp import device_unsupported

    if device_unsupported("cpu") is not None:
        return False
    return _probe_once("gloo_mean_probe.py") == "averages"


def once_per_session(factory: pytest.TempPathFactory, name: str, job: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """The folder ``job(folder)`` wrote its results into, run once per test session. A module-scoped fixture runs
    once per pytest-xdist worker that runs one of the module's tests, and worksteal spreads a module's tests over
    both: a multi-process job behind such a fixture ran twice. The first worker to ask runs it in a folder of the
    session's shared temporary root; another waits for it and reads the same folder (its tests only read it)."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <session root>/popen-gwN
    return _once(root / f"shared-{name}", job)


def _once(out: pathlib.Path, job: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """``out``, filled by ``job(out)`` unless a process before this one completed it: the first to take the lock
    beside it runs the job, the others wait and find it done (a failed attempt is run afresh by the next)."""
    import fcntl
    import shutil

    done = out.with_name(out.name + ".done")
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if out.is_dir():
                shutil.rmtree(out)
            else:
                out.unlink(missing_ok=True)  # a file of an older layout
            out.mkdir(parents=True)
            job(out)
            done.touch()
    return out


def _probe_once(script: str) -> str:
    """The last line ``SCRIPTS/script`` prints, run once per interpreter, torch and probe, not once per test
    process: pytest-xdist's workers each collect the suite, and the probe starts three processes that import
    torch. The answer is kept in the temporary directory under a key of everything it depends on."""
    import hashlib
    import tempfile

    import torch

    from ember.plugins.strategies import fsdp

    key = hashlib.sha256("\0".join([sys.executable, torch.__version__, (SCRIPTS / script).read_text(),
                                     pathlib.Path(fsdp.__file__).read_text()]).encode()).hexdigest()[:16]

    def probe(out: pathlib.Path) -> None:
        printed = run([sys.executable, str(SCRIPTS / script), str(free_port())], cwd=SCRIPTS, timeout=120)
        (out / "answer").write_text(printed.strip().splitlines()[-1])

    folder = pathlib.Path(tempfile.gettempdir()) / f"ember-tests-{pathlib.Path(script).stem}-{key}"
    return (_once(folder, probe) / "answer").read_text()


#: For tests of strategy.fsdp and sharded checkpoints: they skip, saying why, on a torch without it.
#: Variables a launcher sets; a test job must not inherit them from the test run.
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "NODE_RANK",
                  "MASTER_ADDR", "MASTER_PORT", "PYTEST_CURRENT_TEST")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCHER_VARS and not k.startswith(("TORCHELASTIC", "SLURM_", "COV_CORE"))}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A started command; ``wait()`` returns (returncode, output) or kills the group after ``timeout``."""

    def __init__(self, argv: list[str], cwd: pathlib.Path, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env or clean_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def wait(self, timeout: float, cleanup: bool = True) -> tuple[int, str]:
        """Wait for the command; with ``cleanup``, then kill whatever of its process group is left."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            out, _ = self.proc.communicate()
            raise AssertionError(f"{' '.join(self.argv)} did not finish within {timeout} s; output:\n{out}") from None
        if cleanup:
            self.kill_group()
        return self.proc.returncode, out

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(argv: list[str], cwd: pathlib.Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """Run to completion; fail the test with the output when the exit status is not 0."""
    code, out = Job(argv, cwd, env).wait(timeout)
    assert code == 0, f"{' '.join(argv)} exited with {code}:\n{out}"
    return out


def load_script(name: str) -> ModuleType:
    """Import a worker script (its ``__main__`` block does not run) to reuse its model and data."""
    path = SCRIPTS / name
    spec = importlib.util.spec_from_file_location(f"dist_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
    return True


needs_fsdp = pytest.mark.skipif(not fsdp_available(), reason="strategy.fsdp needs torch >= 2.6 (fully_shard); on "
                                "the CPU >= 2.7 and a gloo that averages (2.7 and 2.8 sum)")
