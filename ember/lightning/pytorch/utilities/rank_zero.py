"""``lightning.pytorch.utilities.rank_zero``: run or print only on the process of global rank 0.

The rank is read when a call is made: ``torch.distributed``'s rank once a process group exists (ember's
strategies create it), else the launcher's environment (``RANK``, ``SLURM_PROCID``, ``LOCAL_RANK``), else 0.
Setting ``rank_zero_only.rank`` fixes it, as in Lightning.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

log = logging.getLogger("ember")
T = TypeVar("T")

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


class LightningDeprecationWarning(DeprecationWarning):
    """The warning :func:`rank_zero_deprecation` gives."""


def _rank_from_environment() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


class _RankZeroOnly:
    """``@rank_zero_only``: the decorated function runs on global rank 0 and returns ``default`` (None) elsewhere.
    ``rank_zero_only(fn, default=x)`` is the same with another value for the other ranks."""

    def __init__(self) -> None:
        self._rank: int | None = None

    @property
    def rank(self) -> int:
        """This process's global rank (settable; when never set, read from the process group or environment)."""
        return self._rank if self._rank is not None else _rank_from_environment()

    @rank.setter
    def rank(self, value: int | None) -> None:
        self._rank = value

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., T | None]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> T | None:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return default

        return wrapped


rank_zero_only = _RankZeroOnly()


def rank_prefixed_message(message: str, rank: int | None) -> str:
    """``"[rank: r] message"`` (the message as it is when ``rank`` is None)."""
    return f"[rank: {rank}] {message}" if rank is not None else message


def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``logging.debug`` on rank 0 (the ``"ember"`` logger)."""
    if rank_zero_only.rank == 0:
        log.debug(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``logging.info`` on rank 0 (the ``"ember"`` logger)."""
    if rank_zero_only.rank == 0:
        log.info(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    """``warnings.warn`` on rank 0 (a ``UserWarning`` unless ``category=`` says otherwise)."""
    if rank_zero_only.rank == 0:
        warnings.warn(message, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """:func:`rank_zero_warn` with :class:`LightningDeprecationWarning`."""
    kwargs.setdefault("category", LightningDeprecationWarning)
    rank_zero_warn(message, stacklevel=stacklevel, **kwargs)


class WarningCache(set):
    """Warn (or log) each message once: ``cache.warn(message)``, ``cache.info(message)``, ``cache.deprecation``."""

    def warn(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_warn(message, stacklevel=stacklevel, **kwargs)

    def deprecation(self, message: str, stacklevel: int = 6, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_deprecation(message, stacklevel=stacklevel, **kwargs)

    def info(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_info(message, stacklevel=stacklevel, **kwargs)


__all__ = ["LightningDeprecationWarning", "WarningCache", "rank_prefixed_message", "rank_zero_debug",
           "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]
