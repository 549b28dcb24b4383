"""ember: a PyTorch training loop whose every step is a pluggy hook.

Public API::

    import ember
    trainer = ember.Trainer(max_epochs=3, precision="bf16-mixed", plugins=[MyPlugin()])
    trainer.fit(model, train_loader, val_loader)

Plugins are plain objects with ``@ember.hookimpl`` methods; see ``ember hooks`` and ``docs/``.
"""

from __future__ import annotations

from ember.core.api.callback import Callback
from ember.core.api.datamodule import DataModule
from ember.core.api.logging_api import log, log_dict
from ember.core.api.module import Module
from ember.core.api.trainer import Trainer
from ember.core.errors import (
    CheckpointError,
    ConfigurationError,
    EmberError,
    HangError,
    NothingToResumeWarning,
    PluginConflictError,
    PluginError,
    UnknownArgumentError,
    UnknownPluginError,
    UntrainedWeightsWarning,
    WorkerFailedError,
)
from ember.core.hooks.config import TrainerConfig
from ember.core.hooks.plugin_manager import EmberWarning
from ember.core.loop.seed import seed_everything
from ember.hookspecs import hookimpl, hookspec
from ember.version import __version__ as __version__

__all__ = [
    "Callback",
    "DataModule",
    "CheckpointError",
    "ConfigurationError",
    "EmberError",
    "HangError",
    "EmberWarning",
    "Module",
    "PluginConflictError",
    "PluginError",
    "Trainer",
    "TrainerConfig",
    "UnknownArgumentError",
    "UnknownPluginError",
    "UntrainedWeightsWarning",
    "NothingToResumeWarning",
    "WorkerFailedError",
    "hookimpl",
    "hookspec",
    "log",
    "log_dict",
    "seed_everything",
]
