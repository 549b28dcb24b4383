"""``lightning.pytorch.strategies.ddp``: ``DDPStrategy`` (ember's ``strategy.ddp``, or ``strategy.ddp_spawn`` for a
``start_method`` other than ``"popen"``)."""

from __future__ import annotations

from typing import Any

from ember.lightning.pytorch.strategies.parallel import ParallelStrategy
from ember.lightning.pytorch.strategies.strategy import THROUGH_METHODS
from ember.lightning.seed import add_forwarders
from ember.plugins.strategies.ddp import DDPStrategy as _EmberDDP
from ember.plugins.strategies.ddp_spawn import DDPSpawnStrategy as _EmberDDPSpawn

__all__ = ["DDPStrategy"]


class DDPStrategy(ParallelStrategy):
    """ember's ``strategy.ddp``: ``DistributedDataParallel`` keyword arguments (``find_unused_parameters``,
    ``static_graph``, ...) and ``process_group_backend``/``timeout`` as in Lightning. ``start_method``:
    ``"popen"`` (the default: every process runs the whole script, ``strategy.ddp``), or ``"spawn"``, ``"fork"``,
    ``"forkserver"`` (processes started from inside ``fit``, results brought back: ``strategy.ddp_spawn``)."""


    plugin_class: type = _EmberDDP

    def __init__(self, accelerator: Any = None, checkpoint_io: Any = None, precision_plugin: Any = None,
                 process_group_backend: str | None = None, timeout: Any = None, start_method: str = "popen",
                 **kwargs: Any) -> None:
        super().__init__(accelerator, checkpoint_io, precision_plugin)
        self._arguments = {"process_group_backend": process_group_backend, "timeout": timeout, **kwargs}
        self._start_method = start_method
        if start_method != "popen" and self.plugin_class is _EmberDDP:
            self.plugin_class = _EmberDDPSpawn
            self._arguments["start_method"] = start_method
        elif start_method != "popen":
            raise ValueError(f"{type(self).__name__}(start_method={start_method!r}): ember starts this strategy's "
                             "processes one way only; leave start_method at 'popen'.")
        self._plugin = self.plugin_class(**self._arguments)  # checks the arguments now

    def plugin_arguments(self) -> dict[str, Any]:
        return self._arguments


add_forwarders(DDPStrategy, _EmberDDP, skip=THROUGH_METHODS)
DDPStrategy.stands_for = (_EmberDDP,)
