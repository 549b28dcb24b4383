"""Seeding every random number generator a run uses."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import os
import random
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from ember.core.loop import rng


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed Python's ``random``, NumPy (if installed) and torch (CPU and every CUDA device).

    ``seed=None`` reads ``EMBER_GLOBAL_SEED`` (or Lightning's ``PL_GLOBAL_SEED``) or uses 0. The seed and
    ``workers`` are left in the environment under both names (``EMBER_GLOBAL_SEED``/``EMBER_SEED_WORKERS`` and
    ``PL_GLOBAL_SEED``/``PL_SEED_WORKERS``, which code written for Lightning reads), for the processes a run
    starts. ``workers=True`` also seeds every data-loader
    worker process, and every batch a worker loads, from this seed, the global rank and the epoch (see
    :class:`WorkerSeeder`; the Trainer applies it to each ``DataLoader`` with workers and no ``worker_init_fn``
    of its own). ``verbose`` logs the seed (at INFO level). Returns the seed.
    """
    if seed is None:
        seed = int(os.environ.get("EMBER_GLOBAL_SEED", os.environ.get("PL_GLOBAL_SEED", 0)))
    if not (-(2**63) <= seed < 2**64):
        raise ValueError(f"seed_everything({seed}): the seed must fit in 64 bits.")
    for prefix in ("EMBER", "PL"):
        os.environ[f"{prefix}_GLOBAL_SEED"] = str(seed)
        os.environ[f"{prefix}_SEED_WORKERS"] = str(int(workers))
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if verbose:
        logging.getLogger(__name__).info("seed set to %d", seed)
    return seed


@contextlib.contextmanager
def preserved_rng(device: torch.device | None = None) -> Iterator[None]:
    """Restore the global random state (Python, NumPy if imported, torch CPU, every initialised CUDA device and
    ``device``'s CUDA generator) on exit, so that what runs inside draws nothing from the stream the training loop
    sees. A generator nothing drew from is left as it is (see :mod:`ember.core.loop.rng`)."""
    state = rng.capture()
    cuda = device is not None and device.type == "cuda"
    with torch.random.fork_rng(devices=[device], device_type="cuda") if cuda else contextlib.nullcontext():
        try:
            yield
        finally:
            rng.restore(state)


# -- data-loader workers -----------------------------------------------------------------------------------
def _derive(*parts: object) -> tuple[int, int, int]:
    """Three 64-bit seeds (torch, Python, NumPy) that depend on every part and on nothing else."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=24).digest()
    return tuple(int.from_bytes(digest[i:i + 8], "little") for i in (0, 8, 16))  # type: ignore[return-value]


def _seed_process(seeds: tuple[int, int, int]) -> None:
    torch.manual_seed(seeds[0])
    random.seed(seeds[1])
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seeds[2] % 2**32)


class WorkerSeeder:
    """The ``worker_init_fn`` that :func:`seed_everything` with ``workers=True`` asks for.

    Every worker process is seeded from (the global seed, the process's global rank, the epoch, the worker id),
    so workers differ from each other and from the workers of other ranks, and a rerun repeats them. Then each
    batch of a map-style dataset is loaded after seeding from (global seed, rank, epoch, the batch's indices):
    which worker loads a batch, and how many batches that worker loaded before, no longer matter. That is what
    makes a resumed fit load the remaining batches with the same random augmentation as a fit that never
    stopped, and what makes it the same for any ``num_workers``.
    """

    def __init__(self, seed: int, rank: int, trainer: Any = None) -> None:
        self.seed, self.rank = seed, rank
        self._trainer = weakref.ref(trainer) if trainer is not None else None
        self._epoch = 0

    @property
    def epoch(self) -> int:
        trainer = self._trainer() if self._trainer is not None else None
        return int(getattr(trainer, "current_epoch", self._epoch)) if trainer is not None else self._epoch

    def __getstate__(self) -> dict[str, Any]:  # spawned workers get the epoch, not the trainer
        return {"seed": self.seed, "rank": self.rank, "_trainer": None, "_epoch": self.epoch}

    def __call__(self, worker_id: int) -> None:
        epoch = self.epoch
        _seed_process(_derive(self.seed, self.rank, epoch, "worker", worker_id))
        info = torch.utils.data.get_worker_info()
        dataset = getattr(info, "dataset", None)
        if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset):
            return
        inner = getattr(dataset, "__getitems__", None)
        base = (self.seed, self.rank, epoch, "batch")

        def getitems(indices: list[int]) -> list[Any]:
            _seed_process(_derive(*base, tuple(int(i) for i in indices)))
            return inner(indices) if callable(inner) else [dataset[i] for i in indices]

        # The DataLoader fetcher loads a batch through ``dataset.__getitems__`` when the attribute exists; this is
        # the worker's own copy of the dataset.
        with contextlib.suppress(AttributeError, TypeError):
            dataset.__getitems__ = getitems


def seed_workers(loader: Any, rank: int = 0, trainer: Any = None) -> Any:
    """``loader`` with :class:`WorkerSeeder` as its ``worker_init_fn`` when ``seed_everything(workers=True)`` was
    called, the loader is a ``DataLoader`` with worker processes, and it has no ``worker_init_fn`` of its own
    (a copy: the user's loader is left as it is). Otherwise ``loader`` itself."""
    if os.environ.get("EMBER_SEED_WORKERS") != "1" or not isinstance(loader, torch.utils.data.DataLoader) \
            or loader.num_workers == 0 or loader.worker_init_fn is not None:
        return loader
    seeded = copy.copy(loader)
    seeded.worker_init_fn = WorkerSeeder(int(os.environ.get("EMBER_GLOBAL_SEED", 0)), rank, trainer)
    return seeded


# -- deterministic algorithms ------------------------------------------------------------------------------
#: The setting each running Trainer found, put back when its run ends.
_DETERMINISTIC_BEFORE: weakref.WeakKeyDictionary[Any, tuple[bool, bool, str | None]] = weakref.WeakKeyDictionary()


def use_deterministic(trainer: Any, mode: bool | str) -> None:
    """Switch torch's deterministic algorithms on for one run (``mode`` True or ``"warn"``), remembering the
    previous setting on ``trainer`` for :func:`restore_deterministic`."""
    if trainer not in _DETERMINISTIC_BEFORE:
        _DETERMINISTIC_BEFORE[trainer] = (torch.are_deterministic_algorithms_enabled(),
                                          torch.is_deterministic_algorithms_warn_only_enabled(),
                                          os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=mode == "warn")


def restore_deterministic(trainer: Any) -> None:
    """Put back what :func:`use_deterministic` changed (at the end of the run, however it ends)."""
    before = _DETERMINISTIC_BEFORE.pop(trainer, None)
    if before is None:
        return
    enabled, warn_only, cublas = before
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    if cublas is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas
