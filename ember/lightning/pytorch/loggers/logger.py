"""``lightning.pytorch.loggers.logger``: ``Logger``, the base of a custom logger, on ember's logger hooks.

A subclass defines Lightning's methods (``name``, ``version``, ``log_metrics(metrics, step)``,
``log_hyperparams(params)``, and as it needs ``save()``, ``finalize(status)``, ``log_graph(model, input_array)``,
``save_dir``, ``log_dir``, ``experiment``) and is passed in ``Trainer(logger=...)`` like any logger. The base
answers ember's ``logger`` role hooks and calls those methods when Lightning's Trainer would: ``log_metrics`` (then
``save()``) on global rank 0 with each logged step or epoch, ``log_hyperparams`` (where hyperparameters were
saved) then ``log_graph`` once per ``fit``, ``validate``, ``test`` and ``predict``,
``finalize("success")`` at the end of each run and ``finalize("failed")`` after an exception.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from argparse import Namespace
from collections.abc import Callable
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.lightning.pytorch.utilities.rank_zero import rank_zero_only


class DummyExperiment:
    """What ``experiment`` gives on processes other than rank 0: every attribute is a call that does nothing."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):  # Python's own protocols (pickling, copying) are not faked
            raise AttributeError(name)
        return self.nop

    def __getitem__(self, idx: int) -> DummyExperiment:
        return self

    def __setitem__(self, *args: Any) -> None:
        return None


def rank_zero_experiment(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a logger's ``experiment`` property getter: rank 0 gets the real object, other ranks a
    :class:`DummyExperiment`."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        if rank_zero_only.rank > 0:
            return DummyExperiment()
        return fn(self)

    return experiment


class Logger(ABC):
    """Subclass to write a logger: ``name``, ``version``, ``log_metrics`` and ``log_hyperparams`` are required."""

    role = "logger"

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        # ember's own loggers (CSVLogger, TensorBoardLogger, ...) are loggers too: isinstance(x, Logger) holds
        if cls is Logger and getattr(subclass, "role", None) == "logger":
            return True
        return NotImplemented  # type: ignore[return-value]

    # -- what a subclass defines ----------------------------------------------------------------------------
    @property
    @abstractmethod
    def name(self) -> str | None:
        """The experiment's name."""

    @property
    @abstractmethod
    def version(self) -> int | str | None:
        """The run's version."""

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record ``metrics`` (name to float) at ``step``."""

    @abstractmethod
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Record the run's hyperparameters."""

    @property
    def root_dir(self) -> str | None:
        """The parent folder of the versions (None: the logger keeps nothing on disk)."""
        return None

    @property
    def log_dir(self) -> str | None:
        """Where this run's files go (None: none); ``trainer.log_dir`` is this, else ``save_dir``."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The folder the logger writes under (None: none)."""
        return None

    @property
    def group_separator(self) -> str:
        """The separator of a metric name's groups (``"train/loss"``)."""
        return "/"

    def log_graph(self, model: torch.nn.Module, input_array: torch.Tensor | None = None) -> None:
        """Record the model's graph (called at each entry point, after ``log_hyperparams``; the default does
        nothing)."""
        return None

    def save(self) -> None:
        """Write what is buffered (called after every ``log_metrics``; the default does nothing)."""
        return None

    def finalize(self, status: str) -> None:
        """The run ended: ``"success"`` or ``"failed"`` (the default calls :meth:`save`)."""
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Lightning calls this after ``ModelCheckpoint`` writes a file; ember does not (the default does nothing)."""
        return None

    # -- ember's hooks, calling the methods above ----------------------------------------------------------
    @hookimpl(specname="log_metrics")
    def _ember_log_metrics(self, metrics: dict, step: int) -> None:
        self.log_metrics(metrics, step)
        self.save()

    @hookimpl(specname="log_hyperparams")
    def _ember_log_hyperparams(self, trainer: Any, params: dict, saved: bool) -> None:
        if saved:  # as Lightning: not called where neither the module nor the DataModule saved any
            self.log_hyperparams(params)
        module = getattr(trainer, "lightning_module", None)
        if module is not None:
            self.log_graph(module, getattr(module, "example_input_array", None))
        self.save()

    @hookimpl(specname="teardown")
    def _ember_teardown(self, trainer: Any) -> None:
        if trainer.is_global_zero and trainer.state.status != "failed":
            self.finalize("success")

    @hookimpl(specname="on_exception")
    def _ember_on_exception(self, trainer: Any) -> None:
        if trainer.is_global_zero:
            self.finalize("failed")


class DummyLogger(Logger):
    """A logger that records nothing (``experiment`` is a :class:`DummyExperiment`)."""

    def __init__(self) -> None:
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
        return self._experiment

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        pass

    def __getitem__(self, idx: int) -> DummyLogger:
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):  # Python's own protocols (pickling for spawned processes, copying) are not faked
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> None:
            return None

        return method


__all__ = ["DummyExperiment", "DummyLogger", "Logger", "rank_zero_experiment"]
