"""Starting a job's processes from inside the running script, and bringing rank 0's results back
(``strategy="ddp_spawn"``, ``"ddp_fork"``, ``"ddp_notebook"``; see :mod:`ember.plugins.strategies.ddp_spawn`).

The calling process packs what the run needs (the Trainer's arguments, the module, the datamodule, the loaders
and the entry point's options; pickled for the spawn start method, handed over as they are by fork) and starts one
process per device with ``torch.multiprocessing``. It hosts the rendezvous store itself, on a port the system
picks, so no free port has to be guessed. Each process builds the Trainer again from its arguments, knows itself
as rank ``i`` of ``n`` (:func:`current_worker`) and runs the same entry point; rank 0 then sends back the module's
weights (after a fit), ``callback_metrics``/``logged_metrics``/``progress_bar_metrics``, every checkpoint
callback's best/last paths and scores, and the entry point's return value. These are put into the calling
process's trainer, module and callbacks (:func:`apply_outcome`).

Failure and exit, as :mod:`ember.launcher` does for ``strategy="ddp"``: a process that fails ends the job (the
others get SIGTERM, then SIGKILL after ``kill_timeout`` seconds) and its error is raised here with its traceback;
an interrupted caller (Ctrl-C) stops its processes the same way before the interrupt goes on; and a started process
dies with its parent (``PR_SET_PDEATHSIG`` on Linux), so none is left behind if the caller is killed.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import sys
from typing import Any

import attrs
import torch

from ember.core.errors import ConfigurationError, WorkerFailedError

__all__ = ["SpawnedProcessDied", "SpawnedProcessError", "WorkerInfo", "current_worker", "run_spawned"]

_CHECKPOINT_FIELDS = ("best_model_path", "best_model_score", "last_model_path", "kth_best_model_path", "kth_value",
                      "best_k_models", "current_score")
_METRICS = ("callback_metrics", "logged_metrics", "progress_bar_metrics")


class SpawnedProcessError(WorkerFailedError, torch.multiprocessing.ProcessRaisedException):
    """A process started by a spawning strategy raised: its rank, error and traceback (also torch's
    ``ProcessRaisedException``, which Lightning raises here)."""


class SpawnedProcessDied(WorkerFailedError, torch.multiprocessing.ProcessExitedException):
    """A process started by a spawning strategy died without a Python error (killed by a signal, ``os._exit``)."""


@attrs.frozen
class WorkerInfo:
    """Where a started process stands in its job."""

    rank: int
    world_size: int
    address: str
    port: int


_current: dict[str, WorkerInfo] = {}


def current_worker() -> WorkerInfo | None:
    """This process's place in the job, when a spawning strategy started it; else None."""
    return _current.get("info")


# -- packing -----------------------------------------------------------------------------------------------------
class _Pickler(pickle.Pickler):
    """Leaves the calling process's Trainer behind (the module, datamodule and callbacks point at it): each
    process builds its own, and the references are set again when its run starts."""

    def __init__(self, file: Any, trainer: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._trainer = trainer

    def persistent_id(self, obj: Any) -> Any:
        return "trainer" if obj is self._trainer else None


# safe: reads only the payload this process's parent pickled in memory a moment before (the user's own model,
# loaders and arguments, as torch.multiprocessing pickles a spawn target's arguments); never a file. What comes
# back from the processes is loaded with weights_only=True (below).
class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        return None


def _dumps(obj: Any, trainer: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, trainer).dump(obj)
    return buffer.getvalue()


def _pieces(request: dict[str, Any], arguments: dict[str, Any]) -> list[tuple[str, Any]]:
    """The parts of a run's payload, each named as the user knows it, to say which one cannot be pickled."""
    pieces: list[tuple[str, Any]] = [("the model", request["module"]), ("the datamodule", request["datamodule"])]
    pieces += [(f"the {stage} dataloaders", loader) for stage, loader in request["loaders"].items()]
    for name, value in arguments.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        pieces += [(f"Trainer({name}=...){f' item {i}' if len(items) > 1 else ''}", item) for i, item in enumerate(items)]
    return pieces


def pack(trainer: Any, request: dict[str, Any], strategy_name: str) -> bytes:
    """The run's payload, pickled; a clear error naming the object that cannot be pickled, and the fix."""
    payload = {**request, "trainer_class": type(trainer), "arguments": trainer.arguments, "rng": _rng_states()}
    try:
        return _dumps(payload, trainer)
    except Exception as err:  # pickling raises all sorts (PicklingError, TypeError, AttributeError)
        culprit = next(((what, obj) for what, obj in _pieces(request, payload["arguments"])
                        if not _picklable(obj, trainer)), ("the run's arguments", None))
        what, obj = culprit
        kind = f" ({type(obj).__name__})" if obj is not None else ""
        raise ConfigurationError(
            f"strategy={strategy_name!r} sends {what}{kind} to the processes it starts by pickling it, and it cannot "
            f"be pickled: {type(err).__name__}: {err}. Make it picklable: define its class at module level (not "
            "inside a function), and keep no lambdas, local functions, open files, locks or threads in its "
            "attributes. Or use strategy='ddp_fork' (started by fork, the processes get the objects without "
            "pickling; not after CUDA is initialized) or strategy='ddp' (every process runs the whole script)."
        ) from err


def _picklable(obj: Any, trainer: Any) -> bool:
    try:
        _dumps(obj, trainer)
    except Exception:
        return False
    return True


def unpack(payload: bytes | dict[str, Any]) -> dict[str, Any]:
    return _Unpickler(io.BytesIO(payload)).load() if isinstance(payload, bytes) else payload  # safe: see _Unpickler


def _rng_states() -> dict[str, Any]:
    """The calling process's random state and determinism flags, for the started processes to begin from (a
    spawned process would start from fresh ones)."""
    numpy = sys.modules.get("numpy")
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": numpy.random.get_state() if numpy is not None else None,
            "deterministic": (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())}


def _restore_rng(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if states["numpy"] is not None:
        import numpy

        numpy.random.set_state(states["numpy"])
    enabled, warn_only = states["deterministic"]
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


# -- the started process -----------------------------------------------------------------------------------------
@attrs.frozen
class _Job:
    world_size: int
    address: str
    port: int
    parent: int
    payload: Any  # bytes (spawn) or the request itself (fork)
    queue: Any


def _tie_to_parent(parent: int) -> None:
    """Die with the calling process, whatever ends it (SIGKILL included): no orphans."""
    import signal

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(128 + int(signal.SIGKILL))


def _worker(rank: int, job: _Job) -> None:
    """What each started process runs (through ``torch.multiprocessing``'s wrapper, which records an error's
    traceback for the calling process; it records only an ``Exception``, so another error, such as pytest's
    ``Failed``, is passed on inside one)."""
    try:
        _run_worker(rank, job)
    except (Exception, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}") from exc


def _run_worker(rank: int, job: _Job) -> None:
    _tie_to_parent(job.parent)
    if "OMP_NUM_THREADS" not in os.environ:  # like torchrun: not a thread per core in each of N processes
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.world_size))
    request = unpack(job.payload)
    _current["info"] = WorkerInfo(rank, job.world_size, job.address, job.port)
    # for what reads the rank before the process group is up (rank-zero-only printing); WORLD_SIZE stays unset,
    # so that the cluster environment does not take this process for one of a job started by hand
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
    _restore_rng(request["rng"])
    trainer = request["trainer_class"](**request["arguments"])
    result = _call_entry(trainer, request)
    outcome = collect_outcome(trainer, request["fn"], result)
    if rank == 0:
        job.queue.put(outcome)


def _call_entry(trainer: Any, request: dict[str, Any]) -> Any:
    fn, loaders, options = request["fn"], request["loaders"], request["options"]
    module, datamodule = request["module"], request["datamodule"]
    common = {"ckpt_path": options.get("ckpt_path"), "weights_only": options.get("weights_only", True)}
    if fn == "fit":
        return trainer.fit(module, train_dataloaders=loaders.get("train"), val_dataloaders=loaders.get("validate"),
                           datamodule=datamodule, **common)
    if fn == "predict":
        if options.get("return_predictions"):
            raise ConfigurationError(
                "Trainer.predict(return_predictions=True) with a strategy that starts its processes from inside the "
                "script (spawn or fork): the predictions stay in those processes. `return_predictions` should be "
                "set to `False` (the default there); write them from each process with a prediction writer "
                "callback (BasePredictionWriter), or use strategy='ddp', where every process runs the whole script.")
        return trainer.predict(module, dataloaders=loaders.get("predict"), datamodule=datamodule,
                               return_predictions=False, **common)
    return getattr(trainer, fn)(module, dataloaders=loaders.get(fn), datamodule=datamodule,
                                verbose=options.get("verbose", True), **common)


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    return value


def collect_outcome(trainer: Any, fn: str, result: Any) -> dict[str, Any]:
    """What rank 0 sends back: tensors as ``torch.save`` bytes (read with ``weights_only=True``), the entry
    point's return value as it is."""
    module = trainer.module
    state = module.state_dict() if fn == "fit" else None  # on every rank: a state_dict may synchronise
    metrics = trainer.loop.metrics
    blob = {
        "weights": _cpu(dict(state)) if state is not None else None,
        **{name: _cpu(dict(getattr(metrics, name))) for name in _METRICS},
        "checkpoints": [{f: _cpu(getattr(cb, f)) for f in _CHECKPOINT_FIELDS if hasattr(cb, f)}
                        for cb in trainer.checkpoint_callbacks],
    }
    buffer = io.BytesIO()
    torch.save(blob, buffer)
    return {"state": buffer.getvalue(), "result": result}


def apply_outcome(trainer: Any, outcome: dict[str, Any]) -> Any:
    """Put rank 0's results into the calling process's module, trainer and checkpoint callbacks; returns the
    entry point's return value."""
    blob = torch.load(io.BytesIO(outcome["state"]), weights_only=True)
    if blob["weights"] is not None:
        # not strict: configure_model may have added layers in the started processes
        trainer.module.load_state_dict(blob["weights"], strict=False)
    metrics = trainer.loop.metrics
    for name in _METRICS:
        target = getattr(metrics, name)
        target.clear()
        target.update(blob[name])
    for callback, fields in zip(trainer.checkpoint_callbacks, blob["checkpoints"]):
        for field, value in fields.items():
            setattr(callback, field, value)
    return outcome["result"]


# -- the calling process -----------------------------------------------------------------------------------------
def run_spawned(trainer: Any, request: dict[str, Any], nprocs: int, start_method: str, strategy_name: str,
                kill_timeout: float) -> dict[str, Any]:
    """Start ``nprocs`` processes that run ``request`` and wait for them; returns rank 0's outcome."""
    import multiprocessing

    import torch.distributed as dist

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigurationError(
            f"strategy={strategy_name!r} was asked to start processes while this process was itself being started "
            "by the spawn start method, which imports the main script again: put the script's work under "
            "`if __name__ == \"__main__\":`.")
    if start_method == "fork" and torch.cuda.is_available() and torch.cuda.is_initialized():
        raise ConfigurationError(
            f"strategy={strategy_name!r} starts its processes by fork, but CUDA is already initialized in this "
            "process, and a forked process cannot use it. Use strategy='ddp_spawn' or strategy='ddp', or keep "
            "CUDA untouched before the run.")
    payload: Any = pack(trainer, request, strategy_name) if start_method != "fork" else \
        {**request, "trainer_class": type(trainer), "arguments": trainer.arguments, "rng": _rng_states()}
    address = "127.0.0.1"
    store = dist.TCPStore(address, 0, None, is_master=True, wait_for_workers=False)  # the system picks the port
    context = torch.multiprocessing.get_context(start_method)
    queue = context.SimpleQueue()
    job = _Job(nprocs, address, store.port, os.getpid(), payload, queue)
    processes = torch.multiprocessing.start_processes(_worker, args=(job,), nprocs=nprocs, join=False,
                                                      start_method=start_method)
    outcome = None
    try:
        while True:
            try:
                done = processes.join(timeout=0.1, grace_period=kill_timeout)
            except torch.multiprocessing.ProcessRaisedException as err:
                raise _raised(err) from None
            except torch.multiprocessing.ProcessExitedException as err:
                raise _died(err) from None
            if outcome is None and not queue.empty():  # read while they run: a large outcome fills the pipe
                outcome = queue.get()
            if done:
                break
    except BaseException:
        _stop(processes.processes, kill_timeout)
        raise
    finally:
        del store
    if outcome is None and not queue.empty():
        outcome = queue.get()
    if outcome is None:
        raise WorkerFailedError("rank 0 ended without sending its results back (it was interrupted, or its run "
                                "stopped on KeyboardInterrupt).", rank=0)
    return outcome  # type: ignore[no-any-return]


def _stop(processes: list[Any], kill_timeout: float) -> None:
    """SIGTERM every process still running, then SIGKILL those still there after ``kill_timeout`` seconds."""
    import time

    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + kill_timeout
    for process in alive:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in alive:
        if process.is_alive():
            process.kill()
            process.join()


def _raised(err: Any) -> SpawnedProcessError:
    text = str(err)
    trace = text.split("terminated with the following error:\n", 1)[-1].rstrip()
    error = next((line for line in reversed(trace.splitlines()) if line.strip()), "an error")
    rank = int(err.error_index)
    failed = SpawnedProcessError(f"rank {rank} (pid {err.error_pid}) failed: {error}\n\nTraceback from rank {rank}:\n{trace}",
                                 rank=rank, error=error, remote_traceback=trace, exitcode=1)
    failed.msg, failed.error_index, failed.error_pid = str(failed), rank, err.error_pid
    return failed


def _died(err: Any) -> SpawnedProcessDied:
    rank = int(err.error_index)
    how = f"was killed by {err.signal_name}" if err.signal_name else f"exited with code {err.exit_code}"
    died = SpawnedProcessDied(f"rank {rank} (pid {err.error_pid}) {how} without a Python error.", rank=rank,
                              error=how, exitcode=err.exit_code)
    died.msg, died.error_index, died.error_pid = str(died), rank, err.error_pid
    died.exit_code, died.signal_name = err.exit_code, err.signal_name
    return died
