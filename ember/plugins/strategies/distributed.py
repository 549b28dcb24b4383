"""What the multi-process strategies (``strategy.ddp``, ``strategy.fsdp``) share.

One process per device, joined in a ``torch.distributed`` process group (gloo on CPU, NCCL on CUDA):

* ``distributed_info`` is wrapped to read the job's shape from the active cluster environment;
* ``launch`` starts the job's processes from a plain ``python train.py`` (:mod:`ember.launcher`);
* ``setup_environment`` brings up the process group (kept for the life of the process, destroyed at exit:
  see "Exit" below);
* ``process_dataloader`` gives each rank its share of the data (:mod:`ember.plugins.strategies.sampler`);
* the collectives (``reduce``, ``all_gather``, ``broadcast``, ``barrier``, ``reduce_boolean_decision``).

Failure: a rank that raises ends its process; the launcher (ember's or torchrun) notices within its monitor
interval (0.1 s) and stops the others. Ranks started some other way notice the lost connection in their
next collective or, at the latest, when the process group's ``timeout`` runs out.

Exit: ``destroy_process_group`` only forgets a group; the group itself (with its backend's threads: gloo's
workers and socket loop) lives on while anything holds it: the device mesh of ``strategy.fsdp`` (and through it
every sharded parameter and torch's DTensor caches), the ``DistributedDataParallel`` wrapper of
``strategy.ddp`` (``trainer.model``), the default arguments of ``torch.distributed.nn.functional`` if it is
imported after the group is up. A backend thread that is still letting go of its last collective's tensors
when the interpreter shuts down needs the GIL, which it can no longer take: the process then dies with
"terminate called without an active exception" (SIGABRT), after all its work is done. So the exit handler,
after destroying the group, also lets go of what the strategies made (their meshes and wrappers no longer work
without the group anyway) and collects garbage: the group is freed and its threads joined while the
interpreter is still whole.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import weakref
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import torch

from ember.core.api.role_plugins import trainer_of
from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins._shared.devices import device_count
from ember.plugins.strategies.sampler import shard_loader
from ember.plugins.strategies.surface import StrategySurface

#: How long a collective may wait for the other ranks before it fails (torch's own default).
DEFAULT_TIMEOUT = timedelta(minutes=30)
_REDUCE_OPS = ("sum", "mean", "max", "min")
_state = {"owned": False, "failed": False}


def configured_accelerator(config: Any) -> str | None:
    """The accelerator the Trainer arguments name, by its short name (``"cuda"`` for ``"gpu"``, and for ``"auto"``
    when CUDA devices are counted); None for ``"auto"`` without them."""
    arg = config.accelerator
    if not isinstance(arg, str):
        arg = str(getattr(arg, "identity", "")).rpartition(".")[2]
    if arg == "auto":
        return "cuda" if device_count("cuda") > 0 else None
    return arg


def requested_processes(config: Any, accelerator: str | None = None) -> int:
    """Processes per node that ``Trainer(devices=...)`` asks for (``"auto"`` and ``-1``: every CUDA device under
    the cuda accelerator, else 1). ``accelerator`` is the selected one's short name (default: the one the
    arguments name, :func:`configured_accelerator`)."""
    devices = config.devices
    if isinstance(devices, bool):
        raise ConfigurationError(f"Trainer(devices={devices!r}) is invalid: expected an int, a list of device "
                                 "indices, a string like '0,1', or 'auto'.")
    if devices in ("auto", None, -1, "-1"):
        if (accelerator or configured_accelerator(config)) == "cuda":
            return max(1, device_count("cuda"))
        return 1
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str):
        parts = [d for d in devices.split(",") if d.strip()]
        if len(parts) > 1 or devices.strip().endswith(","):
            return len(parts)
        devices = devices.strip()
        if not devices.isdigit():
            raise ConfigurationError(f"Trainer(devices={config.devices!r}) is invalid: expected an int, a list of "
                                     "device indices, a string like '0,1', or 'auto'.")
        devices = int(devices)
    if not isinstance(devices, int) or devices < 1:
        raise ConfigurationError(f"Trainer(devices={config.devices!r}) is invalid: expected a number of devices >= 1, "
                                 "a list of device indices, or 'auto'.")
    return devices


def accumulating(trainer: Any, module: Any, batch_idx: int) -> bool:
    """True for a training micro-batch whose gradients stay local: not the last of its accumulation window.

    The loop steps the optimizer on ``(i + 1) % k == 0`` and on the epoch's last batch; with data of unknown
    length the last batch is not known in advance, so every micro-batch synchronises."""
    k = trainer.config.accumulate_grad_batches
    if k == 1 or not getattr(module, "automatic_optimization", True):
        return False
    return (batch_idx + 1) % k != 0 and batch_idx + 1 < trainer.num_training_batches


def _accelerator_name(trainer: Any) -> str:
    return trainer.role_identities.get("accelerator", "accelerator.cpu").split(".", 1)[1]


def default_backend(device_type: str) -> str:
    """The process-group backend for a device type: NCCL for CUDA, gloo for the CPU."""
    import torch.distributed as dist

    if device_type == "cuda":
        return "nccl" if dist.is_nccl_available() else "gloo"
    return dist.Backend.default_device_backend_map.get(device_type, "gloo")


#: What the strategies made that holds the process group (device meshes, sharded modules, DistributedDataParallel
#: wrappers), for the exit handler to release (see "Exit" in the module docstring). By identity: device meshes
#: of the same shape compare equal.
_holders: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def hold(obj: Any) -> Any:
    """Record ``obj`` as holding the process group, for the exit handler to release; returns ``obj``."""
    _holders[id(obj)] = obj
    return obj


def _destroy_group_at_exit() -> None:
    import torch.distributed as dist

    # After a failure a collective may be pending: leave the group to the process's end rather than risk a hang.
    if not _state["owned"] or _state["failed"]:
        return
    groups = []
    if dist.is_initialized():
        groups.append(dist.group.WORLD)
        dist.destroy_process_group()
    _release_groups(groups)


def _is_group_handle(value: Any) -> bool:
    """A process group, or a c10d object that may hold one (DDP's reducer and its logger, a store, a work)."""
    import torch.distributed as dist

    return isinstance(value, dist.ProcessGroup) or type(value).__module__ == "torch._C._distributed_c10d"


def _release_groups(groups: list[Any] | None = None) -> None:
    """Let go of the destroyed process groups (``groups``, and those the holders have), so that they are freed
    (and their threads joined) now, while the interpreter is whole, rather than during its shutdown; see "Exit"
    in the module docstring.

    From each recorded holder, through containers and torch.distributed's own objects (a mesh's registry of
    groups, a sharded module's state, a parameter's placement), every reference to a group is dropped; nothing
    of it works without the group anyway. Then torch's DTensor plans (which keep their meshes) are forgotten and
    garbage collected. The groups' Python handles go last: their release lets go of the GIL while the backend
    joins its threads, one of which may be waiting for the GIL to let go of its last collective's tensors (a
    group released last by DDP's reducer, which keeps the GIL, would wait for that thread for ever).
    """
    import torch.distributed as dist

    handles = list(groups or [])
    seen: set[int] = set()
    todo: list[Any] = list(_holders.values())
    roots = {id(obj) for obj in todo}
    _holders.clear()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            entries: Any = obj
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
            continue
        elif id(obj) in roots or type(obj).__module__.startswith("torch.distributed"):
            entries = getattr(obj, "__dict__", None)
            if not isinstance(entries, dict):
                continue
        else:
            continue
        for key, value in list(entries.items()):
            if _is_group_handle(value):
                if isinstance(value, dist.ProcessGroup):
                    handles.append(value)
                entries[key] = None
            else:
                todo.append(value)
    redistribute = sys.modules.get("torch.distributed.tensor._redistribute")
    clear = getattr(redistribute, "clear_redistribute_planner_cache", None)  # DTensor plans keep their meshes
    if callable(clear):
        clear()
    gc.collect()
    handles.clear()


class ProcessGroupStrategy(StrategySurface):
    """Base of the multi-process strategies; see the module docstring."""

    role = "strategy"
    identity = "strategy.distributed"
    #: Runs over a process group (what Lightning's ``trainer._accelerator_connector.is_distributed`` says).
    is_distributed = True

    def __init__(self, *, process_group_backend: str | None = None, timeout: timedelta | float = DEFAULT_TIMEOUT,
                 distributed_sampler: bool = True, kill_timeout: float | None = None) -> None:
        if not isinstance(timeout, timedelta):
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
                raise ConfigurationError(f"{type(self).__name__}(timeout={timeout!r}) is invalid: expected seconds > 0 "
                                         "or a datetime.timedelta.")
            timeout = timedelta(seconds=timeout)
        self.process_group_backend = process_group_backend
        self.timeout = timeout
        self.distributed_sampler = distributed_sampler
        self.kill_timeout = kill_timeout
        self.info: dict[str, Any] = {}
        self._quieted: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def num_processes(self) -> int:
        """Processes per node (Lightning's ``ParallelStrategy.num_processes``): the job's once it runs, else what
        ``Trainer(devices=...)`` asks for on the selected accelerator (``"auto"`` and ``-1``: every CUDA device)."""
        local = self.info.get("local_world_size")
        if isinstance(local, int) and local > 0:
            return local
        trainer = trainer_of(self)
        return requested_processes(trainer.config, _accelerator_name(trainer)) if trainer is not None else 1

    @staticmethod
    def check_available(config: Any) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            raise ConfigurationError("this torch build has no torch.distributed, which multi-process strategies need; "
                                     "use strategy='single_device'.")

    # -- the job ------------------------------------------------------------------------------------------------
    @hookimpl(wrapper=True)
    def distributed_info(self, trainer: Any) -> Generator[None, dict, dict]:
        info = yield
        self.info = dict(info)
        if self.info.get("launched"):
            self._check_shape(trainer)
        return info

    def _check_shape(self, trainer: Any) -> None:
        config, info = trainer.config, self.info
        local = info.get("local_world_size")
        if config.devices not in ("auto", None, -1, "-1") and local is not None:
            wanted = requested_processes(config, _accelerator_name(trainer))
            if wanted != local:
                raise ConfigurationError(
                    f"Trainer(devices={config.devices!r}) asks for {wanted} processes per node, but the launcher started "
                    f"{local} on this node (world size {info['world_size']}). Make them agree, or pass devices='auto' "
                    "to take the launcher's count.")
        nodes = info.get("num_nodes")
        if config.num_nodes != 1 and nodes is not None and config.num_nodes != nodes:
            raise ConfigurationError(f"Trainer(num_nodes={config.num_nodes}) disagrees with the {nodes} nodes the launcher "
                                     "started; make them agree, or leave num_nodes at 1 to take the launcher's count.")

    @hookimpl
    def launch(self, trainer: Any) -> int | None:
        if self.info.get("launched"):
            return None
        nproc = requested_processes(trainer.config, _accelerator_name(trainer))
        nodes = trainer.config.num_nodes
        if nproc * nodes == 1:
            return None  # a job of one process: run it here
        from ember.launcher import KILL_TIMEOUT, run_processes, script_argv

        argv = script_argv()
        node_rank = None
        if nodes > 1:
            if "NODE_RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
                raise ConfigurationError(
                    f"Trainer(num_nodes={nodes}) from a plain `python` needs NODE_RANK, MASTER_ADDR and MASTER_PORT set "
                    "on every node; or start each node with `ember run --nnodes N --node-rank R ...` or torchrun.")
            node_rank = int(os.environ["NODE_RANK"])
        return run_processes(argv, nproc, nnodes=nodes, node_rank=node_rank,
                             main_address=self.info.get("main_address") or "127.0.0.1",
                             main_port=self.info.get("main_port"),
                             kill_timeout=KILL_TIMEOUT if self.kill_timeout is None else self.kill_timeout)

    @hookimpl
    def setup_environment(self, trainer: Any) -> None:
        import torch.distributed as dist

        logger = logging.getLogger("ember")
        if trainer.global_rank != 0 and self._quieted is None:  # rank-zero-only informational logging
            self._quieted = logger.level
            logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
        if dist.is_initialized():
            if dist.get_world_size() != trainer.world_size or dist.get_rank() != trainer.global_rank:
                raise ConfigurationError(
                    f"a process group is already up with rank {dist.get_rank()} of {dist.get_world_size()}, but the "
                    f"cluster environment says rank {trainer.global_rank} of {trainer.world_size}.")
            return
        backend = self.process_group_backend or default_backend(_accelerator_name(trainer))
        port = self.info.get("main_port")
        # Its functions take the world group as a default argument, bound on first import: imported once the group
        # is up (torch does so lazily, e.g. with a first optimizer), they would hold it to the end of the process.
        import torch.distributed.nn  # noqa: F401

        store = self.rendezvous_store(trainer)
        if store is not None:
            dist.init_process_group(backend, store=store, rank=trainer.global_rank, world_size=trainer.world_size,
                                    timeout=self.timeout)
        elif trainer.world_size == 1 and not port:  # a group of one: an in-memory store, no port to find
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=self.timeout)
        elif not port:
            raise ConfigurationError("the cluster environment gave no port for the process group's rendezvous; "
                                     "set MASTER_PORT.")
        else:
            os.environ["MASTER_ADDR"] = str(self.info.get("main_address") or "127.0.0.1")
            os.environ["MASTER_PORT"] = str(port)
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and attempt != "0":
                # A restarted group meets in the elastic agent's store, which still holds the addresses the
                # dead attempt's processes published: a key prefix of this attempt keeps them apart.
                store = dist.PrefixStore(f"/ember/attempt_{attempt}/", dist.TCPStore(
                    os.environ["MASTER_ADDR"], int(port), trainer.world_size, is_master=False, timeout=self.timeout))
                dist.init_process_group(backend, store=store, rank=trainer.global_rank,
                                        world_size=trainer.world_size, timeout=self.timeout)
            else:
                dist.init_process_group(backend, init_method="env://", rank=trainer.global_rank,
                                        world_size=trainer.world_size, timeout=self.timeout)
        if not _state["owned"]:
            atexit.register(_destroy_group_at_exit)
        _state["owned"] = True

    def rendezvous_store(self, trainer: Any) -> Any:
        """A ``torch.distributed`` store for the ranks to meet in, or None: the environment's address and port
        (``env://``). A strategy that hosts the store in the process that started the job answers it."""
        return None

    @hookimpl
    def teardown(self) -> None:
        if self._quieted is not None:
            logging.getLogger("ember").setLevel(self._quieted)
            self._quieted = None

    @hookimpl
    def on_exception(self) -> None:
        _state["failed"] = True

    # -- checkpoints --------------------------------------------------------------------------------------------
    @hookimpl
    def on_save_checkpoint(self, trainer: Any, checkpoint: dict) -> None:
        """Keep every rank's random state, not only that of the rank that writes the file: ranks that draw
        differently (dropout seeded by rank, say) then resume exactly too. Every rank builds the checkpoint."""
        import torch.distributed as dist

        if "rng" in checkpoint and self._active(trainer):
            states: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(states, checkpoint["rng"])
            checkpoint.setdefault("plugins", {})[self.identity] = {"rng": states}

    @hookimpl
    def on_load_checkpoint(self, trainer: Any, checkpoint: dict) -> None:
        states = checkpoint.get("plugins", {}).get(self.identity, {}).get("rng")
        if isinstance(states, list) and len(states) == trainer.world_size:
            checkpoint["rng"] = states[trainer.global_rank]

    # -- data ---------------------------------------------------------------------------------------------------
    @hookimpl
    def process_dataloader(self, trainer: Any, dataloader: Any, stage: str) -> Any:
        if not self.distributed_sampler or not trainer.config.use_distributed_sampler or trainer.world_size == 1:
            return None
        return shard_loader(dataloader, trainer.world_size, trainer.global_rank, stage)

    # -- collectives --------------------------------------------------------------------------------------------
    def _comm_device(self, trainer: Any) -> torch.device:
        import torch.distributed as dist

        if dist.get_backend() == "nccl":
            return trainer.root_device
        return torch.device("cpu")

    @staticmethod
    def _active(trainer: Any) -> bool:
        import torch.distributed as dist

        return trainer.world_size > 1 and dist.is_initialized()

    @hookimpl(specname="reduce")  # (``reduce`` itself is Lightning's method: see surface.py)
    def _ember_reduce(self, trainer: Any, tensor: torch.Tensor, op: str) -> torch.Tensor | None:
        import torch.distributed as dist

        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce(op={op!r}): expected one of {', '.join(_REDUCE_OPS)}.")
        if not self._active(trainer):
            return tensor
        device = tensor.device
        value = tensor.detach().to(self._comm_device(trainer), copy=True)
        if op == "mean" and not value.is_floating_point():
            value = value.to(torch.float32)
        torch_op = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                    "min": dist.ReduceOp.MIN}[op]
        dist.all_reduce(value, op=torch_op)
        if op == "mean":
            value /= trainer.world_size
        return value.to(device)

    @hookimpl(specname="all_gather")  # (``all_gather`` itself is Lightning's method: see surface.py)
    def _ember_all_gather(self, trainer: Any, tensor: torch.Tensor, sync_grads: bool) -> torch.Tensor | None:
        import torch.distributed as dist

        if not self._active(trainer):
            return None
        device = tensor.device
        local = tensor.to(self._comm_device(trainer)).contiguous()
        if sync_grads:  # gradients of the gathered tensor flow back to each rank's own part (summed)
            from torch.distributed import _functional_collectives as fc

            if hasattr(fc, "all_gather_single_autograd"):  # torch >= 2.5
                gathered = fc.all_gather_single_autograd(local.unsqueeze(0), 0, dist.group.WORLD)  # type: ignore[arg-type]
                return (gathered * 1).to(device)  # ``* 1`` waits for the collective and gives a plain tensor
            from torch.distributed.nn.functional import all_gather as all_gather_autograd

            return torch.stack(all_gather_autograd(local)).to(device)
        parts = [torch.empty_like(local) for _ in range(trainer.world_size)]
        dist.all_gather(parts, local)
        return torch.stack(parts).to(device)

    @hookimpl(specname="broadcast", wrapper=True)  # (``broadcast`` itself is Lightning's method)
    def _ember_broadcast(self, trainer: Any, obj: Any, src: int) -> Generator[None, Any, Any]:
        import torch.distributed as dist

        local = yield  # a wrapper, so that a None sent by ``src`` is an answer too
        if not self._active(trainer):
            return local
        box = [obj if trainer.global_rank == src else None]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    @hookimpl(specname="barrier")  # (``barrier`` itself is Lightning's method: see surface.py)
    def _ember_barrier(self, trainer: Any, name: str | None) -> bool:
        import torch.distributed as dist

        if self._active(trainer):
            if dist.get_backend() == "nccl":
                dist.barrier(device_ids=[trainer.root_device.index or 0])
            else:
                dist.barrier()
        return True

    @hookimpl(specname="reduce_boolean_decision")  # (the plain name is Lightning's method: see surface.py)
    def _ember_reduce_boolean_decision(self, trainer: Any, decision: bool, all: bool) -> bool:
        import torch.distributed as dist

        if not self._active(trainer):
            return bool(decision)
        votes = torch.tensor(int(bool(decision)), device=self._comm_device(trainer))
        dist.all_reduce(votes, op=dist.ReduceOp.SUM)
        return bool(votes.item() == trainer.world_size) if all else bool(votes.item() > 0)
