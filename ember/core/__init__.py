"""The loop and the plugin machinery, in four rooms by concern; reaches plugins only through the plugin manager.

Imports point one way (``tests/test_architecture.py`` checks it, type-only imports included)::

    api            the classes users touch: Trainer, Module, DataModule, Callback, ember.log
     |  may import everything below
    checkpointing  what a checkpoint holds, its file format, where it goes, background writes, resume
     |  may import loop, hooks, errors
    loop           the loops and the state they own: data, optimization, metrics, signals, seeds
     |  may import hooks, errors
    hooks          the plugin machinery: discovery, the plugin manager, dispatch, options, the Trainer's
     |             arguments, core's plain-PyTorch defaults
    errors         the errors ember raises (a module; imports nothing of ember)

and everything in ``ember.core`` may import ``ember.hookspecs``, which imports nothing of ember. Code below
``api`` that needs the Trainer annotates with :class:`ember.hookspecs.TrainerLike` (or a protocol of its own
room), never with ``Trainer``.

A module's path before the rooms (``ember.core.trainer``, ``ember.core.signals``, ...) still imports, as
the same module object as its new path (:data:`MOVED`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: Each room and its modules.
ROOMS = {
    "hooks": ("class_hooks", "config", "defaults", "discovery", "dispatch", "options", "plugin_manager",
              "positional", "tracing", "trainer_args"),
    "loop": ("combined", "data", "evaluation", "loop_views", "loops", "metrics", "module_overrides", "optim", "parts",
             "results", "resumable_data", "rng", "run_inputs", "schedulers", "seed", "signals", "state", "training"),
    "checkpointing": ("async_writer", "checkpoint", "checkpoint_format", "checkpoint_paths", "checkpoint_writes",
                      "plugin_state", "restarts", "script_guard", "writer_process"),
    "api": ("callback", "datamodule", "hparams", "logger_adapter", "logging_api", "module", "null_logger",
            "role_plugins", "trainer", "trainer_properties"),
}

#: Modules written since the rooms: they never had a path directly under ember.core.
_BORN_IN_A_ROOM = frozenset({"combined", "hparams", "logger_adapter", "loop_views", "null_logger", "parts",
                             "plugin_state", "restarts", "role_plugins", "schedulers", "script_guard", "trainer_args",
                             "writer_process"})

#: A module's former path -> its path now.
MOVED = {f"{__name__}.{module}": f"{__name__}.{room}.{module}" for room, modules in ROOMS.items()
         for module in modules if module not in _BORN_IN_A_ROOM}


class _FormerPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves a former path to the module at its new one (one module object under both names)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when its new path was imported."""


if not any(isinstance(finder, _FormerPaths) for finder in sys.meta_path):
    sys.meta_path.append(_FormerPaths())
