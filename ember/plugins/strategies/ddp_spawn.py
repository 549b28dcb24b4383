"""``strategy.ddp_spawn``, ``strategy.ddp_fork``, ``strategy.ddp_notebook``: DDP whose processes are started
from inside the running script, as Lightning's strategies of those names do.

``strategy="ddp"`` re-runs the whole program in every process (as torchrun does); these instead start one process
per device from the call to ``fit``/``validate``/``test``/``predict`` (with ``torch.multiprocessing``: the spawn
start method, or fork for ``ddp_fork``/``ddp_notebook``). Each process builds the Trainer again from its
arguments, joins the process group (gloo on CPU, NCCL on CUDA) and runs the same call; then rank 0's results come
back to the calling process: the trained weights into the user's module, ``callback_metrics``,
``logged_metrics``, the checkpoint callbacks' best and last paths, and the return value of ``validate``/``test``.
As in Lightning, ``predict`` returns no predictions here (write them with a prediction writer callback), and the
Trainer's progress counters (``global_step``, ``current_epoch``) stay in the processes.

Under spawn, the model, the datamodule, the loaders and the Trainer's arguments (callbacks, loggers) are pickled
(defined at module level; a script's work under ``if __name__ == "__main__":``); fork hands them over as they are,
but cannot be used once CUDA is initialized. Every process starts from the caller's random state. Failure and exit
follow :mod:`ember.launcher`'s policy (see :mod:`ember.plugins.strategies.spawn`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ember.core.errors import ConfigurationError
from ember.core.loop.state import Launched
from ember.hookspecs import hookimpl
from ember.plugins.strategies.ddp import DDPStrategy
from ember.plugins.strategies.distributed import _accelerator_name, requested_processes
from ember.plugins.strategies.spawn import apply_outcome, current_worker, run_spawned

START_METHODS = ("spawn", "fork", "forkserver")


class DDPSpawnStrategy(DDPStrategy):
    """``DDPSpawnStrategy(start_method="spawn", **ddp_kwargs)``: the arguments of :class:`DDPStrategy`, and how the
    processes are started (``"spawn"``, ``"fork"`` or ``"forkserver"``)."""

    identity = "strategy.ddp_spawn"
    default_start_method = "spawn"

    def __init__(self, *, start_method: str | None = None, **kwargs: Any) -> None:
        start_method = start_method or self.default_start_method
        if start_method not in START_METHODS:
            raise ConfigurationError(f"{type(self).__name__}(start_method={start_method!r}) is invalid: expected one of "
                                     f"{', '.join(START_METHODS)}.")
        import multiprocessing

        if start_method not in multiprocessing.get_all_start_methods():
            raise ConfigurationError(f"{type(self).__name__}(start_method={start_method!r}): this platform starts "
                                     f"processes only by {', '.join(multiprocessing.get_all_start_methods())}.")
        super().__init__(**kwargs)
        self.start_method = start_method

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return None  # only when asked for by name or instance

    @hookimpl(wrapper=True)
    def distributed_info(self, trainer: Any) -> Generator[None, dict, dict]:
        info = yield
        worker = current_worker()
        if worker is not None:  # one of the processes this strategy started: its place comes from the start
            info = {**info, "global_rank": worker.rank, "local_rank": worker.rank, "node_rank": 0,
                    "world_size": worker.world_size, "local_world_size": worker.world_size, "num_nodes": 1,
                    "main_address": worker.address, "main_port": worker.port, "launched": True}
        elif info.get("launched"):
            raise ConfigurationError(
                f"strategy={self.identity.split('.', 1)[1]!r} starts its processes itself, but this process is already "
                "one of a job started by a launcher (torchrun, SLURM, `ember run`, or WORLD_SIZE set by hand). Use "
                "strategy='ddp' under a launcher.")
        self.info = dict(info)
        if worker is not None:
            self._check_shape(trainer)
        return info

    def rendezvous_store(self, trainer: Any) -> Any:
        worker = current_worker()
        if worker is None:
            return None
        import torch.distributed as dist

        return dist.TCPStore(worker.address, worker.port, None, is_master=False, timeout=self.timeout)

    @hookimpl
    def launch(self, trainer: Any) -> Any:
        if current_worker() is not None:
            return None
        if trainer.config.num_nodes != 1:
            raise ConfigurationError(f"Trainer(num_nodes={trainer.config.num_nodes}) with strategy="
                                     f"{self.identity.split('.', 1)[1]!r}: it starts processes on this machine only; "
                                     "use strategy='ddp' with a launcher on every node.")
        from ember.launcher import KILL_TIMEOUT

        nprocs = requested_processes(trainer.config, _accelerator_name(trainer))
        request = {**trainer.loop.request, "module": trainer.module, "datamodule": trainer.datamodule}
        outcome = run_spawned(trainer, request, nprocs, self.start_method, self.identity.split(".", 1)[1],
                              KILL_TIMEOUT if self.kill_timeout is None else self.kill_timeout)
        return Launched(apply_outcome(trainer, outcome))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["model"] = None  # a DistributedDataParallel wrapper of a finished run holds its process group
        return state


class DDPForkStrategy(DDPSpawnStrategy):
    """``strategy="ddp_fork"``: the processes are started by fork (they get the objects without pickling)."""

    identity = "strategy.ddp_fork"
    default_start_method = "fork"


class DDPNotebookStrategy(DDPForkStrategy):
    """``strategy="ddp_notebook"``: ``ddp_fork`` under the name Lightning gives it for notebooks, where classes
    defined in a cell cannot be pickled for spawn."""

    identity = "strategy.ddp_notebook"
