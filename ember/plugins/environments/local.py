"""``environment.local``: a process the user started: alone, or one of a job started by hand.

Alone (no ``WORLD_SIZE`` set), it is rank 0 of 1 and a multi-process strategy may start the job's processes
from it (``launch``). Started by hand, each process reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (default:
``RANK``), ``NODE_RANK`` (default 0), ``MASTER_ADDR`` (default 127.0.0.1) and ``MASTER_PORT``.
"""

from __future__ import annotations

import os
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.environments import env_int


class LocalEnvironment:
    role = "environment"
    identity = "environment.local"

    @staticmethod
    def auto_select(config: Any) -> int:
        return 0

    @hookimpl
    def distributed_info(self) -> dict:
        if "WORLD_SIZE" not in os.environ:
            return {"global_rank": 0, "local_rank": 0, "node_rank": 0, "world_size": 1, "local_world_size": 1,
                    "num_nodes": 1, "main_address": os.environ.get("MASTER_ADDR", "127.0.0.1"),
                    "main_port": env_int("MASTER_PORT", 0) or None, "launched": False}
        world, rank = env_int("WORLD_SIZE"), env_int("RANK", env_int("GLOBAL_RANK", 0))
        if world > 1 and "MASTER_PORT" not in os.environ:
            raise ConfigurationError(f"WORLD_SIZE={world} is set, so this process is one of a job started by hand, "
                                     "but MASTER_PORT is not: set MASTER_ADDR and MASTER_PORT (where rank 0 listens) "
                                     "in every process.")
        if not 0 <= rank < world:
            raise ConfigurationError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world}).")
        local_world = env_int("LOCAL_WORLD_SIZE", world)
        return {
            "global_rank": rank,
            "local_rank": env_int("LOCAL_RANK", rank % max(local_world, 1)),
            "node_rank": env_int("NODE_RANK", 0),
            "world_size": world,
            "local_world_size": local_world,
            "num_nodes": max(1, world // max(local_world, 1)),
            "main_address": os.environ.get("MASTER_ADDR", "127.0.0.1"),
            "main_port": env_int("MASTER_PORT", 0) or None,
            "launched": True,
        }
