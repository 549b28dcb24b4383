"""``ember.log`` and ``ember.log_dict``: ``self.log`` for any module, bound to the running trainer.

A plain ``nn.Module`` with a ``training_step`` has no ``self.log``; it calls ``ember.log(...)`` instead, with the
same arguments, defaults and meaning. The trainer whose ``fit``/``validate``/``test`` is running in this thread
(the innermost one, when a hook runs another trainer) receives the value.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.core.loop.parts import RunningTrainer

_running: contextvars.ContextVar[RunningTrainer | None] = contextvars.ContextVar("ember_running_trainer", default=None)


@contextlib.contextmanager
def running(trainer: RunningTrainer) -> Iterator[None]:
    """Make ``trainer`` the one ``ember.log`` records into, for the duration of a run."""
    token = _running.set(trainer)
    try:
        yield
    finally:
        _running.reset(token)


def running_trainer() -> RunningTrainer | None:
    """The trainer running in this thread (the innermost), or None."""
    return _running.get()


def _trainer_for(call: str) -> RunningTrainer:
    trainer = _running.get()
    if trainer is None:
        raise RuntimeError(f"{call} was called outside a running trainer: call it from a step (training_step, "
                           "validation_step, ...) or a hook while trainer.fit, validate or test runs.")
    return trainer


def log(name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
        on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean", sync_dist: bool = False,
        batch_size: int | None = None) -> None:
    """Record a metric in the running trainer: ``ember.Module.log`` for any module (see docs/logging.md).
    Defaults follow Lightning: per step in training, per epoch (mean over batches, weighted by batch size) in
    validation, test and epoch hooks."""
    _trainer_for(f"ember.log({name!r})").loop.metrics.log(
        name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch, reduce_fx=reduce_fx,
        sync_dist=sync_dist, batch_size=batch_size)


def log_dict(dictionary: Mapping[str, Any], prog_bar: bool = False, logger: bool | None = None,
             on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
             sync_dist: bool = False, batch_size: int | None = None) -> None:
    """``ember.log`` for every item of ``dictionary``."""
    metrics = _trainer_for(f"ember.log_dict({list(dictionary)!r})").loop.metrics
    for name, value in dictionary.items():
        metrics.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                    reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size)
