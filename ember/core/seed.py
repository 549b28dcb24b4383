"""Seeding every random number generator a run uses."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Iterator

import torch


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and every CUDA device).

    ``seed=None`` reads ``EMBER_GLOBAL_SEED`` or uses 0. ``workers=True`` makes data-loader workers derive
    their seeds from it (sets ``EMBER_SEED_WORKERS=1`` for ``worker_init_fn``). Returns the seed.
    """
    if seed is None:
        seed = int(os.environ.get("EMBER_GLOBAL_SEED", 0))
    if not (-(2**63) <= seed < 2**64):
        raise ValueError(f"seed_everything({seed}): the seed must fit in 64 bits.")
    os.environ["EMBER_GLOBAL_SEED"] = str(seed)
    os.environ["EMBER_SEED_WORKERS"] = str(int(workers))
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    return seed


@contextlib.contextmanager
def preserved_rng(device: torch.device | None = None) -> Iterator[None]:
    """Restore the global random state (Python, NumPy if imported, torch CPU and ``device``'s CUDA generator)
    on exit, so that what runs inside draws nothing from the stream the training loop sees."""
    python_state = random.getstate()
    np = sys.modules.get("numpy")
    numpy_state = np.random.get_state() if np is not None else None
    cuda = device is not None and device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else [], device_type="cuda"):
        try:
            yield
        finally:
            random.setstate(python_state)
            if np is not None:
                np.random.set_state(numpy_state)
