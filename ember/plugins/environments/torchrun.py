"""``environment.torchrun``: processes started by ``torchrun`` or torch's elastic agent.

ember's own launcher (``Trainer(devices=N)`` from a plain script, ``ember run``) starts its processes with
the same agent, so they land here too. On an error, the process writes the elastic agent's error file, so
the agent (and ``torchrun``'s summary) names the rank that failed and shows its traceback.
"""

from __future__ import annotations

import os
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins._shared.launchers import TORCHRUN_VARS, peer_failure, torchrun_detected, write_error_file
from ember.plugins.environments import env_int

#: What torchrun sets for every worker.
_VARS = TORCHRUN_VARS
detected = torchrun_detected  #: True in a process torchrun started
__all__ = ["TorchrunEnvironment", "detected", "install_excepthook", "peer_failure", "write_error_file"]


def install_excepthook(global_rank: int) -> None:
    """Record an error that escapes the script outside a run too (after ``fit``, say); chains the previous hook."""
    import sys

    previous = sys.excepthook
    if getattr(previous, "_ember_rank", None) is not None:
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            write_error_file(exc, global_rank)
        previous(kind, exc, tb)

    hook._ember_rank = global_rank  # type: ignore[attr-defined]
    sys.excepthook = hook


class TorchrunEnvironment:
    """Reads ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
    ``MASTER_PORT``, as set by torchrun for each worker."""

    role = "environment"
    identity = "environment.torchrun"

    @staticmethod
    def auto_select(config: Any) -> int | None:
        return 30 if detected() else None

    @staticmethod
    def check_available(config: Any) -> None:
        if not detected():
            missing = [v for v in ("TORCHELASTIC_RUN_ID", *_VARS) if v not in os.environ]
            raise ConfigurationError(
                f"Trainer(environment='torchrun'): this process was not started by torchrun ({', '.join(missing)} "
                "unset). Start it with `torchrun` or `ember run`, or use environment='auto'.")

    @hookimpl
    def distributed_info(self) -> dict:
        world, local_world = env_int("WORLD_SIZE"), env_int("LOCAL_WORLD_SIZE")
        install_excepthook(env_int("RANK"))
        return {
            "global_rank": env_int("RANK"),
            "local_rank": env_int("LOCAL_RANK"),
            "node_rank": env_int("GROUP_RANK"),
            "world_size": world,
            "local_world_size": local_world,
            "num_nodes": env_int("GROUP_WORLD_SIZE", max(1, world // max(local_world, 1))),
            "main_address": os.environ["MASTER_ADDR"],
            "main_port": env_int("MASTER_PORT"),
            "launched": True,
        }

    @hookimpl
    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        if not isinstance(exception, KeyboardInterrupt):
            write_error_file(exception, trainer.global_rank)
