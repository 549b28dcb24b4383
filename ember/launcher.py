"""Starting a multi-process job with torch's elastic agent (the engine behind ``torchrun``).

Used by the multi-process strategies when a plain ``python train.py`` asks for ``Trainer(devices=N)``, and by
``ember run``. Each started process re-runs the program with torchrun's environment variables set, so it
finds itself ``launched`` (``environment.torchrun``) and runs the loop; this process only waits. When one
process fails, the agent stops the others (SIGTERM, then SIGKILL after ``kill_timeout`` seconds) and the
failure is raised here as :class:`ember.WorkerFailedError`, naming the rank and carrying its traceback.
With ``max_restarts`` (``ember run --max-restarts N``), the agent starts the group again instead, up to N
times, after saying which rank died and how; the fit resumes from the run's newest checkpoint by itself
(:mod:`ember.core.checkpointing.restarts`), and a job out of restarts names every death.

No orphans: every process starts through :func:`worker_main`, which ties its life to this one's: if the launcher dies, by any signal, SIGKILL included, its processes die with it
within about a second, instead of running on holding memory, devices and ports.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ember.core.errors import ConfigurationError, WorkerFailedError

#: Seconds between the agent's checks of its processes: how soon a failure is noticed.
MONITOR_INTERVAL = 0.1
#: Seconds the agent waits after SIGTERM before it SIGKILLs a process that is still there.
KILL_TIMEOUT = 5


def script_argv() -> list[str]:
    """The arguments that make ``python`` run this program again: ``[script, *args]`` or ``["-m", module, *args]``.

    Raises :class:`ember.ConfigurationError` when the program cannot be re-run (an interactive session,
    ``python -c``, a notebook, or pytest).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    how = ("Start the processes yourself instead: `ember run --nproc-per-node N script.py` or "
           "`torchrun --nproc-per-node N script.py`, or pass devices=1.")
    if "PYTEST_CURRENT_TEST" in os.environ:
        raise ConfigurationError("a multi-process strategy would start its processes by re-running the program, "
                                 f"but this is a pytest session. {how}")
    if spec is not None and spec.name not in ("__main__", None) and not spec.name.startswith("ipykernel"):
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    script = getattr(main, "__file__", None)
    if not script or not os.path.isfile(script) or not sys.argv or sys.argv[0] in ("", "-c"):
        raise ConfigurationError("a multi-process strategy starts its processes by re-running the program, but this "
                                 f"program was not started from a script (interactive session, notebook or -c). {how}")
    return [os.path.abspath(script), *sys.argv[1:]]


def run_processes(argv: Sequence[str], nproc_per_node: int, *, nnodes: int = 1, node_rank: int | None = None,
                  main_address: str = "127.0.0.1", main_port: int | None = None, rdzv_backend: str = "static",
                  rdzv_endpoint: str | None = None, run_id: str | None = None, max_restarts: int = 0,
                  monitor_interval: float = MONITOR_INTERVAL, kill_timeout: float = KILL_TIMEOUT) -> int:
    """Run ``python *argv`` in ``nproc_per_node`` processes on this node (of ``nnodes``) and wait for them.

    ``rdzv_backend="static"`` (the default) needs every node's ``node_rank`` and rank 0's ``main_address`` and
    ``main_port`` (on a single node without a port, the agent picks one itself); ``"c10d"`` lets the nodes meet at
    ``rdzv_endpoint`` (``host:port``) and numbers them itself. Returns 0 when every process succeeded;
    raises :class:`ember.WorkerFailedError` for the process that failed first, and ``SystemExit(128 + signal)``
    when this process is interrupted (Ctrl-C: the processes get the signal too).
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if nproc_per_node < 1 or nnodes < 1:
        raise ConfigurationError(f"cannot start {nproc_per_node} processes per node on {nnodes} nodes: both must "
                                 "be at least 1.")
    configs: dict[str, Any] = {}
    if rdzv_backend == "static" and nnodes == 1 and main_port is None:
        # One node and no port asked for: let the agent's store bind a port of its own choosing (as torchrun
        # --standalone does), rather than pick a free one here that something else could take in between.
        rdzv_backend, rdzv_endpoint = "c10d", f"{main_address}:0"
    if rdzv_backend == "static":
        if node_rank is None:
            if nnodes > 1:
                raise ConfigurationError(f"{nnodes} nodes with static rendezvous need each node's rank: pass "
                                         "--node-rank (or set NODE_RANK) on every node.")
            node_rank = 0
        if not 0 <= node_rank < nnodes:
            raise ConfigurationError(f"node rank {node_rank} is outside 0..{nnodes - 1}.")
        if main_port is None:
            raise ConfigurationError(f"{nnodes} nodes need the port where node 0 listens: pass --main-port "
                                     "(or set MASTER_PORT) on every node.")
        rdzv_endpoint = f"{main_address}:{main_port}"
        configs["rank"] = node_rank
    elif rdzv_backend == "c10d":
        if not rdzv_endpoint:
            if nnodes > 1:
                raise ConfigurationError("c10d rendezvous over several nodes needs --rdzv-endpoint host:port.")
            rdzv_endpoint = f"{main_address}:0"
    else:
        raise ConfigurationError(f"rendezvous backend {rdzv_backend!r} is not supported: use 'static' or 'c10d'.")
    if nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        # Like torchrun: keep N processes from each starting a thread per core.
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc_per_node))
    shutdown_timeout = int(max(1, kill_timeout))
    # LaunchConfig takes it from torch 2.12 on; before, the agent of _job_agent applies it alone.
    extra: dict[str, Any] = {"shutdown_timeout": shutdown_timeout} if _launch_config_has("shutdown_timeout") else {}
    deaths: list[str] = []  # one line per worker death that the group was restarted after
    with tempfile.TemporaryDirectory(prefix="ember-launch-") as log_dir:
        state_dir = os.path.join(log_dir, "restart-state")  # kept across restarts: see ember.core.checkpointing.restarts
        os.makedirs(state_dir)
        config = LaunchConfig(
            min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=nproc_per_node, run_id=run_id or uuid.uuid4().hex,
            rdzv_backend=rdzv_backend, rdzv_endpoint=rdzv_endpoint or "", rdzv_configs=configs,
            max_restarts=max_restarts, monitor_interval=monitor_interval, start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=log_dir), **extra)
        try:
            with _job_agent(shutdown_timeout, deaths, max_restarts), _launcher_pid_in_environment(), \
                    _environment(EMBER_RESTART_STATE=state_dir):
                elastic_launch(config, entrypoint=sys.executable)("-c", worker_bootstrap(), *argv)
        except ChildFailedError as err:
            raise _failure(err, deaths) from None
        except SignalException as sig:  # Ctrl-C or a kill: the agent has passed it on and stopped the processes
            raise SystemExit(128 + int(sig.sigval)) from None
    return 0


def _launch_config_has(name: str) -> bool:
    """Whether this torch's ``LaunchConfig`` takes ``name`` (fields come and go between torch releases)."""
    import dataclasses

    from torch.distributed.launcher.api import LaunchConfig

    return name in {f.name for f in dataclasses.fields(LaunchConfig)}


# -- no orphans -------------------------------------------------------------------------------------------
#: The launcher's pid, for its processes to watch.
LAUNCHER_PID_ENV = "EMBER_LAUNCHER_PID"


def _launcher_pid_in_environment() -> contextlib.AbstractContextManager[None]:
    return _environment(**{LAUNCHER_PID_ENV: str(os.getpid())})


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables (which the started processes inherit) for the duration."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def worker_main() -> None:
    """What every started process runs first (as ``python -c``, with nothing imported, not even torch): tie its
    life to the launcher's, then run ``python *sys.argv[1:]`` (a script, or ``-m module``) as ``python`` would.

    If the launcher dies, by any signal, the process dies too: on Linux the kernel sends SIGKILL the moment
    the parent exits (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and as a second guard for the process's own
    children (the elastic agent starts each process in a session of its own, so they share its process
    group), a daemon thread checks the parent every half second and kills the group once the parent has
    changed. Self-contained: its source is what runs (see :func:`worker_bootstrap`).
    """
    import os
    import runpy
    import signal
    import sys
    import threading
    import time

    launcher = os.environ.get("EMBER_LAUNCHER_PID", "")
    if launcher.isdigit():
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
            except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
                pass
        if os.getppid() != int(launcher):  # the launcher died before the signal was armed
            os._exit(128 + int(signal.SIGKILL))

        def watch(parent: int = int(launcher)) -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            if os.getpgrp() == os.getpid():  # the group is this process's own: its children and itself
                os.killpg(os.getpid(), signal.SIGKILL)
            os._exit(128 + int(signal.SIGKILL))

        threading.Thread(target=watch, name="ember-launcher-watch", daemon=True).start()
    argv = sys.argv[1:]
    if argv[:1] == ["-m"]:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as for `python script.py`: the script's folder
    runpy.run_path(argv[0], run_name="__main__")


def worker_bootstrap() -> str:
    """The ``python -c`` program every started process runs: :func:`worker_main`'s own source, then a call."""
    import inspect
    import textwrap

    return textwrap.dedent(inspect.getsource(worker_main)) + "\nworker_main()\n"


@contextlib.contextmanager
def _job_agent(shutdown_timeout: int, deaths: list[str], max_restarts: int) -> Iterator[None]:
    """Put the launcher's own agent in place for the call: torch's ``LocalElasticAgent``, which also

    * honours ``shutdown_timeout`` when it stops the other processes after a failure: torch's elastic agent
      (2.x) stops the survivors of a failed process with a fixed 30 s between SIGTERM and SIGKILL
      (``PContext.close()``'s default), whatever ``shutdown_timeout`` says; a process that ignores SIGTERM (or
      saves a checkpoint on it and waits in a collective) would outlive the failure by 30 s;
    * says, before it starts the group again, which rank died and how (signal or exit code), and appends that
      to ``deaths``, so that a job that runs out of restarts can name every death.

    The launcher builds its agent from ``torch.distributed.launcher.api.LocalElasticAgent``, so the subclass
    is put there for the call.
    """
    import torch.distributed.launcher.api as api

    base = getattr(api, "LocalElasticAgent", None)
    if base is None or not hasattr(base, "_start_workers"):
        yield
        return

    class Agent(base):  # type: ignore[misc, valid-type]
        _last_failures: dict[int, Any] = {}

        def _start_workers(self, worker_group: Any) -> Any:
            started = super()._start_workers(worker_group)
            pcontext = getattr(self, "_pcontext", None)
            if pcontext is not None:
                close = pcontext.close

                def close_within_timeout(death_sig: Any = None, *args: Any, **kwargs: Any) -> None:
                    close(death_sig, shutdown_timeout)

                pcontext.close = close_within_timeout
            return started

        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            self._last_failures = dict(getattr(result, "failures", None) or {})
            return result

        def _restart_workers(self, worker_group: Any) -> None:
            attempt = len(deaths) + 1
            hung = hung_ranks(self._last_failures)
            died = "; ".join(f"rank {r} (pid {f.pid}) {_how(f, hung.get(r))}"
                             for r, f in sorted(self._last_failures.items())
                             if not _stopped_by_agent(f)) or "a process failed"
            deaths.append(f"attempt {attempt}: {died}")
            print(f"ember run: {died}; stopping the others and starting the group again (restart {attempt} of "
                  f"{max_restarts}); the fit resumes from the run's newest checkpoint.", file=sys.stderr, flush=True)
            super()._restart_workers(worker_group)

    api.LocalElasticAgent = Agent  # type: ignore[misc]
    try:
        yield
    finally:
        api.LocalElasticAgent = base  # type: ignore[misc]


def _stopped_by_agent(failure: Any) -> bool:
    """A process the agent itself stopped (SIGTERM, or SIGKILL after the timeout) after another one failed."""
    import signal

    return failure.exitcode in (-int(signal.SIGTERM),)


def _how(failure: Any, hung: dict | None = None) -> str:
    """How a process ended, from the agent's ``ProcessFailure``: killed by a signal (after the hang watchdog named
    it as hung: ``hung``, see :func:`hung_ranks`), or its exit code."""
    if failure.exitcode < 0:
        return hung_text(hung, failure) if hung else f"was killed by {failure.signal_name()}"
    message = failure.message
    error = str(message.get("message", "")) if isinstance(message, dict) else ""
    return f"exited with code {failure.exitcode}" + (f" ({error.splitlines()[0]})" if error else "")


def _failure(err: Any, deaths: Sequence[str] = ()) -> BaseException:
    """What the launcher raises for the agent's ChildFailedError: ``SystemExit(128 + signal)`` when every
    process stopped on a signal in order (after saving), else a :class:`WorkerFailedError` (naming, after
    restarts, every earlier death too)."""
    stopped = signal_stop_status(err.failures)
    if stopped is not None:
        print(f"ember run: the processes stopped on a signal (exit status {stopped}).", file=sys.stderr)
        return SystemExit(stopped)
    failed = describe_failure(err)
    if deaths:
        lines = [f"the job ran out of restarts ({len(deaths)} restart(s)); earlier deaths:",
                 *(f"  {d}" for d in deaths), "last failure:", str(failed)]
        return WorkerFailedError("\n".join(lines), rank=failed.rank, error=failed.error,
                                 remote_traceback=failed.remote_traceback, exitcode=failed.exitcode)
    return failed


def signal_stop_status(failures: dict[int, Any]) -> int | None:
    """``128 + signal`` when every failed process stopped on a signal the ember way (``SignalExit`` after a
    SIGTERM, or Ctrl-C's ``KeyboardInterrupt``), else None: a failure to report."""
    import signal

    codes = set()
    for failure in failures.values():
        message = failure.message
        error = str(message.get("message", "")) if isinstance(message, dict) else ""
        if failure.exitcode == -int(signal.SIGINT) or error.startswith("KeyboardInterrupt"):
            codes.add(128 + int(signal.SIGINT))
        elif error.startswith("SignalExit: ") and error[len("SignalExit: "):].strip().isdigit():
            # its status is in the message: the process may have been sent the agent's SIGTERM while exiting
            codes.add(int(error[len("SignalExit: "):]))
        else:
            return None
    return max(codes) if codes else None


def _ember_info(failure: Any) -> dict:
    message = failure.message
    if isinstance(message, dict):
        return message.get("extraInfo", {}).get("ember", {}) or {}
    return {}


def hung_ranks(failures: dict[int, Any]) -> dict[int, dict]:
    """The processes that the hang watchdog named as hung, from any process's error record: global rank -> its
    last global step, hook and line as the watchdog's heartbeats knew them, whether its heartbeat had stopped too
    (``frozen``: the whole process stopped), and the watchdog's timeout."""
    hung: dict[int, dict] = {}
    for failure in failures.values():
        named = _ember_info(failure).get("hung")
        if isinstance(named, dict):
            hung.update({int(r): info for r, info in named.items() if str(r).isdigit() and isinstance(info, dict)})
    return hung


def hung_text(info: dict, failure: Any) -> str:
    """How a process that the hang watchdog named as hung (``info``, from :func:`hung_ranks`) and that died by a
    signal ended: it could not record an error itself (stopped, or frozen), and was killed when the job stopped."""
    seconds = f"{float(info.get('timeout', 0)):g} s"
    if info.get("frozen"):
        how = (f"hung: no progress and no heartbeat for {seconds} (the whole process was stopped, e.g. by SIGSTOP "
               "or a debugger, or frozen)")
    else:
        how = f"hung: no progress for {seconds}"
    hook, where = info.get("hook") or "?", info.get("where") or "?"
    last = f"; last heard from at global step {info.get('step', '?')}" + (f", in {hook}" if hook != "?" else "") + \
        (f" ({where})" if where != "?" else "")
    return f"{how}{last}; the launcher killed it ({failure.signal_name()}) when the job stopped"


def root_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """The failure that started it: the earliest one that was not caused by a peer's (ember's error files say
    which), else the agent's choice (earliest whole-second timestamp)."""
    def key(item: tuple[int, Any]) -> tuple:
        rank, f = item
        info = _ember_info(f)
        return (bool(info.get("peer_failure", False)), info.get("time", float(f.timestamp)), rank)

    return min(failures.items(), key=key)


def describe_failure(err: Any) -> WorkerFailedError:
    """A :class:`WorkerFailedError` for the elastic agent's ``ChildFailedError``."""
    rank, failure = root_failure(err.failures)
    hung = hung_ranks(err.failures)
    message = failure.message
    error, remote_tb = "", ""
    if isinstance(message, dict):
        error = str(message.get("message", ""))
        remote_tb = str(message.get("extraInfo", {}).get("py_callstack", ""))
    elif failure.exitcode < 0:
        error = hung_text(hung[rank], failure) if rank in hung else f"killed by signal {failure.signal_name()}"
    else:
        error = f"exited with code {failure.exitcode} without a Python error (e.g. os._exit or a crash)"
    lines = [f"rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) "
             f"{'' if error.startswith('hung: ') else 'failed: '}{error}"]
    if remote_tb:
        lines += ["", f"Traceback from rank {rank}:", remote_tb.rstrip()]
    others = [f"rank {r}: {_short(f, hung.get(r))}" for r, f in sorted(err.failures.items()) if r != rank]
    if others:
        lines += ["", "Also failed: " + "; ".join(others)]
    return WorkerFailedError("\n".join(lines), rank=rank, error=error, remote_traceback=remote_tb,
                             exitcode=failure.exitcode)


def _short(failure: Any, hung: dict | None = None) -> str:
    message = failure.message
    if isinstance(message, dict):
        text = str(message.get("message", ""))
        return text + (" (after another rank failed)" if _ember_info(failure).get("peer_failure") else "")
    if hung and failure.exitcode < 0:
        return hung_text(hung, failure)
    return str(message) if message else f"exit code {failure.exitcode}"

