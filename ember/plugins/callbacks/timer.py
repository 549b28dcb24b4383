"""``callback.timer``: a time budget for training (``Trainer(max_time=...)``), and timings per stage."""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from ember.core.errors import ConfigurationError
from ember.core.hooks.config import parse_duration
from ember.hookspecs import hookimpl

log = logging.getLogger("ember")
_STAGES = ("train", "validate", "test", "predict")


class Timer:
    """Stop training once ``duration`` has passed, checked when the fit starts (a budget spent by the runs
    restored from a checkpoint stops it before its first batch), then after every training batch
    (``interval="step"``) or at the end of each epoch (``interval="epoch"``). Validation time counts towards the
    budget, as does the time of earlier runs restored from a checkpoint. The ``"validate"`` stage's time includes
    the sanity check's (Lightning's).

    :param duration: a ``timedelta``, ``"DD:HH:MM:SS"``, a dict such as ``{"hours": 2}``, seconds, or None to
        take ``Trainer(max_time=...)`` (None there too: only measure).
    :param interval: ``"step"`` or ``"epoch"``.
    :param verbose: log when the budget ends training.

    ``time_elapsed(stage)``, ``time_remaining()``, ``start_time(stage)`` and ``end_time(stage)`` answer in
    seconds (stages: ``"train"``, ``"validate"``, ``"test"``, ``"predict"``). The clock is ``time.monotonic`` of
    this module (of ``lightning.pytorch.callbacks.timer`` too, where a test may patch it). The event methods also
    take Lightning's ``(trainer, pl_module)`` when called directly.
    """

    identity = "callback.timer"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("max_time", type="timedelta | str | dict | float | None", default=None, validate=parse_duration,
                    switches="callback.timer",
                    help="stop training after this long: a timedelta, 'DD:HH:MM:SS', {'hours': 2} or seconds")

    def __init__(self, duration: Any = None, interval: str = "step", verbose: bool = True) -> None:
        if interval not in ("step", "epoch"):
            raise ConfigurationError(f"Timer(interval={interval!r}): Unsupported parameter value; expected 'step' or "
                                     "'epoch'.")
        self._length = parse_duration(duration, "Timer(duration)")
        self.interval = interval
        self.verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offsets: dict[str, float] = dict.fromkeys(_STAGES, 0.0)

    @property
    def duration(self) -> datetime.timedelta | None:
        return self._length

    # Lightning's private names, which code written for its Timer reads: the duration in seconds, and the training
    # time restored from a checkpoint.
    @property
    def _duration(self) -> float | None:
        return None if self._length is None else self._length.total_seconds()

    @property
    def _offset(self) -> float:
        return self._offsets["train"]

    def start_time(self, stage: str = "train") -> float | None:
        return self._start[stage]

    def end_time(self, stage: str = "train") -> float | None:
        return self._end[stage]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage``, restored time included."""
        start, end = self._start[stage], self._end[stage]
        offset = self._offsets[stage]
        if start is None:
            return offset
        return offset + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        if self._length is None:
            return None
        return self._length.total_seconds() - self.time_elapsed(stage)

    # -- state: kept in checkpoint["plugins"][identity] by core.checkpoint, saved once and restored once -----
    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._offsets.update(state.get("time_elapsed", {}))

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl
    def setup(self, trainer: Any) -> None:
        max_time = trainer.config.max_time
        passed = max_time is not None and any(c is self for c in trainer.config.callbacks)
        if self._length is None:
            self._length = parse_duration(max_time)
            if passed:
                log.info("Trainer(max_time=%s): the callbacks list already contains a Timer, without a duration of "
                         "its own; it stops the fit after max_time.", self._length)
        elif passed:
            log.info("Trainer(max_time=%s) is ignored: the callbacks list already contains a Timer, whose own "
                     "duration (%s) applies.", parse_duration(max_time), self._length)

    def _begin(self, stage: str) -> None:
        self._start[stage] = time.monotonic()
        self._end[stage] = None

    def _stop(self, stage: str) -> None:
        if self._start[stage] is not None and self._end[stage] is None:
            self._end[stage] = time.monotonic()

    # (``trainer=None, pl_module=None``: the arguments of a direct call in Lightning's style; the loop passes none)
    @hookimpl
    def on_train_start(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._begin("train")

    @hookimpl
    def on_train_end(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._stop("train")

    @hookimpl
    def on_validation_start(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._begin("validate")

    @hookimpl
    def on_validation_end(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._stop("validate")

    @hookimpl
    def on_test_start(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._begin("test")

    @hookimpl
    def on_test_end(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._stop("test")

    @hookimpl
    def on_predict_start(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._begin("predict")

    @hookimpl
    def on_predict_end(self, trainer: Any = None, pl_module: Any = None) -> None:
        self._stop("predict")

    @hookimpl
    def on_fit_start(self, trainer: Any) -> None:
        self._check(trainer)  # whatever the interval: a budget restored already spent stops the fit now

    @hookimpl
    def on_train_batch_end(self, trainer: Any) -> None:
        if self.interval == "step":
            self._check(trainer)

    @hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: Any) -> None:
        if self.interval == "epoch":
            self._check(trainer)

    def _check(self, trainer: Any) -> None:
        if self._length is None or trainer.should_stop:
            return
        out = self.time_elapsed("train") >= self._length.total_seconds()
        if trainer.world_size > 1:
            out = trainer.broadcast(out)
        if out:
            trainer.should_stop = True
            if self.verbose and trainer.is_global_zero:
                spent = datetime.timedelta(seconds=int(self.time_elapsed("train")))
                log.warning("Time limit reached. %s of training (limit %s) at epoch %d, step %d. Signaling Trainer "
                            "to stop.", spent, self._length, trainer.current_epoch, trainer.global_step)
