"""Loggers: plugins of the ``logger`` role. Several may be active at once; each implements the
``log_metrics`` and ``log_hyperparams`` hooks, which core calls on global rank 0 only.

Every built-in logger has Lightning's logger surface: ``name``, ``version``, ``save_dir``, ``log_dir``,
``experiment``, ``log_hyperparams(params)``, ``log_metrics(metrics, step)``, ``save()`` and
``finalize(status)``. This module holds what the built-in loggers share: the ``<save_dir>/<name>/version_<n>``
layout (the run folder, where ``ModelCheckpoint`` also puts its ``checkpoints/``) and the ``hparams.yaml`` file.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Any

_VERSION = re.compile(r"^version_(\d+)$")


def next_version(root: str) -> int:
    """The first ``n`` with no ``version_n`` folder under ``root`` (0 when ``root`` does not exist)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    taken = [int(m.group(1)) for n in names if (m := _VERSION.match(n)) and os.path.isdir(os.path.join(root, n))]
    return max(taken) + 1 if taken else 0


def tensorboard_available() -> bool:
    """Whether the ``tensorboard`` package is installed (found without importing it)."""
    return importlib.util.find_spec("tensorboard") is not None


def plain(value: Any) -> Any:
    """``value`` as YAML-safe data: containers kept, numbers and strings kept, anything else as text."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a 0-d tensor or numpy scalar
        return plain(value.item())
    return str(value)


def save_hparams(path: str, params: Mapping[str, Any]) -> None:
    """Write ``params`` to ``path`` as YAML (values that YAML cannot hold are written as text)."""
    import yaml

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(plain(dict(params)), f, sort_keys=False)
    os.replace(tmp, path)


class VersionedLogger:
    """The ``<save_dir>/<name>/version_<n>`` folder a logger writes into.

    ``save_dir`` defaults to the Trainer's ``default_root_dir``; ``version`` defaults to the next free number,
    fixed at the logger's first run (``setup``), so every logger of one Trainer with the same ``name`` shares
    one folder and a later ``test()`` writes next to the ``fit()`` that preceded it. A new Trainer (a resumed
    fit included) starts the next version, as in Lightning.
    """

    role = "logger"

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str = "ember_logs",
                 version: int | str | None = None, prefix: str = "") -> None:
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._name = name or ""
        self._version = version
        self._version_given = version is not None
        self._attached = False
        self.prefix = prefix

    @property
    def save_dir(self) -> str:
        return self._save_dir if self._save_dir is not None else os.getcwd()

    @property
    def name(self) -> str:
        return self._name

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the parent of the version folders."""
        return os.path.join(self.save_dir, self.name)  # ``name`` as a subclass may define it

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(self.root_dir)
        return self._version

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_<n>`` (or ``<save_dir>/<name>/<version>`` for a string version)."""
        version = self.version
        return os.path.join(self.root_dir, version if isinstance(version, str) else f"version_{version}")

    def _attach(self, trainer: Any) -> None:
        """Take the Trainer's root folder as ``save_dir`` if none was given, and fix the version on every rank
        (process 0's: the next free number there), once."""
        if self._save_dir is None:
            self._save_dir = trainer.default_root_dir
        if self._attached:
            return
        self._attached = True
        from ember.core.checkpointing import restarts
        from ember.plugins._shared.folders import check_writable

        if trainer.is_global_zero:
            check_writable(self.root_dir, "the run folder", "choose a writable one with Trainer(default_root_dir=...) "
                           "or the logger's save_dir")
        if self._version_given:
            return
        if trainer.is_global_zero:  # a restarted job writes where its first attempt did
            remembered = restarts.remembered_version(self.root_dir)
            if remembered is not None:
                self._version = remembered
            restarts.remember_version(self.root_dir, self.version)
        if trainer.world_size > 1:
            self._version = trainer.broadcast(self.version if trainer.is_global_zero else None)
        else:
            self.version  # noqa: B018  (fixes the next free number now, before anything is written)

    def _key(self, name: str) -> str:
        return f"{self.prefix}-{name}" if self.prefix else name
