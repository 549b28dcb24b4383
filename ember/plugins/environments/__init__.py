"""Cluster environments: where a process sits in a multi-process job, read from what its launcher set.

One environment is active per run (``Trainer(environment="auto"|"torchrun"|"slurm"|"local")``; ``"auto"``
picks the highest ``auto_select`` priority: torchrun 30, SLURM 20, local 0). It answers the
``distributed_info`` role hook; strategies wrap that hook to read the answer.
"""

from __future__ import annotations

import os
import socket


def env_int(name: str, default: int | None = None) -> int:
    """An integer environment variable, with an error naming it when it is malformed or missing."""
    from ember.core.errors import ConfigurationError

    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise ConfigurationError(f"environment variable {name} is not set; the launcher should set it.")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"environment variable {name}={raw!r} is not an integer.") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it: bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
