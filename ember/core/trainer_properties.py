"""What the Trainer shows plugins and the module: Lightning's read-only properties.

The run state lives in records the loop owns (:mod:`ember.core.state`); the properties here read it, most
through C-level getters, so that a plugin reading ``trainer.global_step`` at every step costs no Python call.
"""

from __future__ import annotations

import math
import operator
import os
from typing import TYPE_CHECKING, Any

import torch

from ember.core.checkpoint import is_checkpoint_callback
from ember.core.results import to_floats

if TYPE_CHECKING:
    from ember.core.config import TrainerConfig
    from ember.core.loops import Loops
    from ember.core.state import TrainerState


def _read(path: str, doc: str, writable: bool = False) -> Any:
    """A Trainer property that reads ``path`` (``"loop.progress.global_step"``); ``writable``: it may be set."""
    getter = operator.attrgetter(path)
    if not writable:
        return property(getter, doc=doc)
    owner, name = path.rsplit(".", 1)
    owner_of = operator.attrgetter(owner)

    def setter(trainer: Any, value: Any) -> None:
        setattr(owner_of(trainer), name, value)

    return property(getter, setter, doc=doc)


class TrainerProperties:
    """The Trainer's read-only view of its run (``should_stop`` may be set)."""

    if TYPE_CHECKING:
        config: TrainerConfig
        loop: Loops
        state: TrainerState
        module: Any
        global_rank: int
        num_training_batches: float
        role_identities: dict[str, str]
        extra_plugins: list[tuple[str, Any]]
        autoload_plugins: list[tuple[str, Any]]

    # The run state, read-only (``should_stop`` may be set): C-level getters, so reading them per step costs
    # no Python call.
    current_epoch: int = _read("loop.progress.current_epoch", "Epochs completed (the index of the running one).")
    global_step: int = _read("loop.progress.global_step", "Optimizer steps taken.")
    batch_idx: int = _read("loop.progress.batch_idx", "The index of the running training batch in its epoch.")
    should_stop: bool = _read("loop.progress.should_stop", "Set True to end the fit at the next point it may stop "
                              "(after ``min_epochs``/``min_steps``).", writable=True)
    sanity_checking: bool = _read("state.sanity_checking", "True during the validation run before training.")
    callback_metrics: dict[str, torch.Tensor] = _read(
        "loop.metrics.callback_metrics", "Every value logged (step and epoch values), for callbacks to monitor.")
    logged_metrics: dict[str, torch.Tensor] = _read("loop.metrics.logged_metrics",
                                                    "The values logged with ``logger=True``.")

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def precision(self) -> str:
        return self.role_identities["precision"].split(".", 1)[1]

    @property
    def training(self) -> bool:
        return self.state.stage == "train"

    @property
    def validating(self) -> bool:
        return self.state.stage == "validate"

    @property
    def testing(self) -> bool:
        return self.state.stage == "test"

    @property
    def predicting(self) -> bool:
        return self.state.stage == "predict"

    @property
    def max_epochs(self) -> int:
        return self.loop.max_epochs

    @property
    def max_steps(self) -> int:
        return self.loop.max_steps

    @property
    def default_root_dir(self) -> str:
        return self.config.default_root_dir

    @property
    def accumulate_grad_batches(self) -> int:
        return self.config.accumulate_grad_batches

    @property
    def loggers(self) -> list[Any]:
        """The run's logger plugins, in the order given (empty without a logger)."""
        return [p for ident, p in self.extra_plugins if ident.startswith("logger.") or getattr(p, "role", None) == "logger"]

    @property
    def logger(self) -> Any:
        """The first logger, or None."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    @property
    def log_dir(self) -> str:
        """The run folder: the first logger's ``log_dir`` (``<save_dir>/<name>/version_<n>``), else its ``save_dir``
        (MLflow), else ``default_root_dir``."""
        logger = self.logger
        log_dir = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)
        return os.fspath(log_dir) if log_dir else self.config.default_root_dir

    @property
    def callbacks(self) -> list[Any]:
        """The plugins of this trainer other than role plugins and loggers (callbacks, progress bar, ...)."""
        loggers = {id(p) for p in self.loggers}
        return [p for _, p in self.extra_plugins if id(p) not in loggers]

    @property
    def progress_bar_callback(self) -> Any:
        """The active progress-bar plugin, or None."""
        return next((p for ident, p in self.extra_plugins
                     if ident.startswith("progress.") or getattr(p, "role", None) == "progress"), None)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The ``prog_bar=True`` metrics as floats (reading them synchronises with the device)."""
        return to_floats(self.loop.metrics.progress_bar_metrics)

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the fit will take (``max_steps`` or epochs x steps per epoch)."""
        if self.loop.max_steps != -1:
            return self.loop.max_steps
        per_epoch = math.ceil(self.num_training_batches / self.config.accumulate_grad_batches)
        return per_epoch * max(self.loop.max_epochs, 1) if self.loop.max_epochs != -1 else math.inf

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The checkpoint callbacks of this trainer (``ModelCheckpoint`` and anything with ``best_model_path``)."""
        return [p for _, p in self.extra_plugins + self.autoload_plugins if is_checkpoint_callback(p)]

    @property
    def checkpoint_callback(self) -> Any:
        """The first checkpoint callback, or None."""
        found = self.checkpoint_callbacks
        return found[0] if found else None
