"""``lightning.pytorch.strategies``'s classes as ember plugins (see :mod:`ember.lightning.seed`), one module each as
in Lightning (``.strategy``, ``.single_device``, ``.parallel``, ``.ddp``, ``.fsdp``, and the placeholders
``.deepspeed`` and ``.model_parallel``).

``Trainer(strategy=DDPStrategy(find_unused_parameters=True))`` runs ember's ``strategy.ddp`` with those
arguments; a subclass's override of ``reduce``, ``all_gather``, ``barrier``, ``broadcast``,
``reduce_boolean_decision``, ``process_dataloader``, ``batch_to_device``, ``model_sharded_context``,
``setup_environment`` or ``save_checkpoint`` answers the ember hook of that name, and its ``setup``,
``teardown``, ``on_exception``, ``on_train_start``, ... are ember events.
"""

from __future__ import annotations

from ember.lightning.pytorch.strategies.ddp import DDPStrategy
from ember.lightning.pytorch.strategies.deepspeed import DeepSpeedStrategy
from ember.lightning.pytorch.strategies.fsdp import FSDPStrategy
from ember.lightning.pytorch.strategies.model_parallel import ModelParallelStrategy
from ember.lightning.pytorch.strategies.parallel import ParallelStrategy
from ember.lightning.pytorch.strategies.single_device import SingleDeviceStrategy
from ember.lightning.pytorch.strategies.strategy import Strategy

__all__ = ["DDPStrategy", "DeepSpeedStrategy", "FSDPStrategy", "ModelParallelStrategy", "ParallelStrategy",
           "SingleDeviceStrategy", "Strategy"]
