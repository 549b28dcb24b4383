"""``lightning.pytorch.plugins.environments``'s classes as ember plugins of the ``environment`` role (see
:mod:`ember.lightning.seed`): ``Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])``.

The built-ins configure ember's environments: ``LightningEnvironment`` is ``environment.local``,
``SLURMEnvironment`` ``environment.slurm`` (``auto_requeue``, ``requeue_signal``) and ``TorchElasticEnvironment``
``environment.torchrun``. ember asks an environment one question, ``distributed_info`` (this process's place in
the job); a :class:`ClusterEnvironment` answers it from Lightning's methods (``global_rank()``, ``world_size()``,
``local_rank()``, ``node_rank()``, ``main_address``, ``main_port``, ``creates_processes_externally``), so a
subclass for a cluster of its own implements those, as on Lightning, and a subclass of a built-in overrides one.
"""

from __future__ import annotations

import os
from typing import Any

from ember.hookspecs import hookimpl
from ember.lightning._names import unsupported
from ember.lightning.seed import SeedPlugin, add_forwarders, base_hook
from ember.plugins.environments.local import LocalEnvironment as _EmberLocal
from ember.plugins.environments.slurm import SLURMEnvironment as _EmberSLURM
from ember.plugins.environments.torchrun import TorchrunEnvironment as _EmberTorchrun

__all__ = ["ClusterEnvironment", "KubeflowEnvironment", "LSFEnvironment", "LightningEnvironment", "MPIEnvironment",
           "SLURMEnvironment", "TorchElasticEnvironment", "XLAEnvironment"]

#: The ember hooks a ClusterEnvironment answers through Lightning's methods.
THROUGH_METHODS = frozenset({"distributed_info", "configure"})


class ClusterEnvironment(SeedPlugin):
    """Lightning's ``ClusterEnvironment``. A direct subclass implements ``creates_processes_externally``,
    ``main_address``, ``main_port``, ``detect``, ``world_size``, ``global_rank``, ``local_rank`` and ``node_rank``
    (the defaults describe one process alone); the built-ins answer them from ember's environment."""

    role = "environment"

    def __init__(self) -> None:
        self._world_size: int | None = None
        self._global_rank: int | None = None

    def _info(self) -> dict[str, Any]:
        """The inner ember environment's answer (one process alone without one)."""
        info = self.delegate("distributed_info", None)
        if info is None:
            return {"global_rank": 0, "local_rank": 0, "node_rank": 0, "world_size": 1, "local_world_size": 1,
                    "num_nodes": 1, "main_address": "127.0.0.1", "main_port": None, "launched": False}
        return dict(info)

    @property
    def creates_processes_externally(self) -> bool:
        """True when the processes were started by someone else (torchrun, srun): ember then starts none."""
        return bool(self._info()["launched"])

    @property
    def main_address(self) -> str:
        return str(self._info()["main_address"])

    @property
    def main_port(self) -> int:
        return int(self._info()["main_port"] or 0)

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        own = getattr(self, "_world_size", None)
        return int(own) if own is not None else int(self._info()["world_size"])

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        own = getattr(self, "_global_rank", None)
        return int(own) if own is not None else int(self._info()["global_rank"])

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    def local_rank(self) -> int:
        return int(self._info()["local_rank"])

    def node_rank(self) -> int:
        return int(self._info()["node_rank"])

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check the Trainer's ``devices``/``num_nodes`` against the environment (nothing by default)."""

    @base_hook
    def teardown(self) -> None:
        """Called at the end of each run when a subclass overrides it."""

    @hookimpl(specname="distributed_info")
    def _ember_distributed_info(self) -> dict[str, Any]:
        info = self._info()
        world, nodes = self.world_size(), int(info.get("num_nodes") or 1)
        if world != info["world_size"]:  # a subclass's own count: spread evenly over the nodes
            info["local_world_size"] = int(os.environ.get("LOCAL_WORLD_SIZE", max(1, world // max(nodes, 1))))
        info.update(global_rank=self.global_rank(), local_rank=self.local_rank(), node_rank=self.node_rank(),
                    world_size=world, main_address=self.main_address, main_port=self.main_port or None,
                    launched=self.creates_processes_externally)
        return info


class LightningEnvironment(ClusterEnvironment):
    """ember's ``environment.local``: one process, from which a multi-process strategy starts the others, or
    one of a job started by hand (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``)."""

    plugin_class = _EmberLocal

    @staticmethod
    def detect() -> bool:
        return True


class SLURMEnvironment(ClusterEnvironment):
    """ember's ``environment.slurm``: ``auto_requeue`` and ``requeue_signal`` as in Lightning."""

    plugin_class = _EmberSLURM

    def __init__(self, auto_requeue: bool = True, requeue_signal: Any = None) -> None:
        super().__init__()
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal

    def plugin_arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {"auto_requeue": self.auto_requeue}
        if self.requeue_signal is not None:
            arguments["requeue_signal"] = self.requeue_signal
        return arguments

    @staticmethod
    def detect() -> bool:
        return "SLURM_NTASKS" in os.environ and "SLURM_PROCID" in os.environ

    @staticmethod
    def job_id() -> int | None:
        job = os.environ.get("SLURM_JOB_ID")
        return int(job) if job and job.isdigit() else None


class TorchElasticEnvironment(ClusterEnvironment):
    """ember's ``environment.torchrun``: a worker started by torchrun (or ``ember run``)."""

    plugin_class = _EmberTorchrun

    @staticmethod
    def detect() -> bool:
        from ember.plugins.environments.torchrun import detected

        return bool(detected())


for _cls in (LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment):
    add_forwarders(_cls, _cls.plugin_class, skip=THROUGH_METHODS)


#: Placeholders: they import (and can be subclassed or named in isinstance) and raise when constructed.
KubeflowEnvironment = unsupported(
    "KubeflowEnvironment", "ember has no KubeflowEnvironment: start the job with torchrun (a Kubeflow PyTorchJob "
    "can run it), which ember detects, or subclass ClusterEnvironment.", __name__)
LSFEnvironment = unsupported(
    "LSFEnvironment", "ember has no LSFEnvironment: start the processes with torchrun under LSF (jsrun/blaunch), "
    "which ember detects, or subclass ClusterEnvironment.", __name__)
MPIEnvironment = unsupported(
    "MPIEnvironment", "ember has no MPIEnvironment: start the processes with torchrun, which ember detects, or "
    "subclass ClusterEnvironment to read the ranks mpirun sets.", __name__)
XLAEnvironment = unsupported(
    "XLAEnvironment", "ember has no XLAEnvironment: ember does not run on XLA/TPU devices.", __name__)
