"""``callback.early-stopping``: stop training when a monitored metric stops improving."""

from __future__ import annotations

import logging
import math
from enum import Enum
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl

log = logging.getLogger("ember")


class EarlyStoppingReason(Enum):
    """Why :class:`EarlyStopping` stopped a fit (``NOT_STOPPED`` while it has not)."""

    NOT_STOPPED = "not_stopped"
    STOPPING_THRESHOLD = "stopping_threshold"
    DIVERGENCE_THRESHOLD = "divergence_threshold"
    PATIENCE_EXHAUSTED = "patience_exhausted"
    NON_FINITE_METRIC = "non_finite_metric"


class EarlyStopping:
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` checks in a row.

    :param monitor: the logged metric to watch (a key of ``trainer.callback_metrics``).
    :param min_delta: the smallest change that counts as an improvement.
    :param patience: how many checks without improvement to allow before stopping. With validation every
        ``check_val_every_n_epoch`` epochs, a check is a validation run, not an epoch.
    :param mode: ``"min"`` (lower is better) or ``"max"``.
    :param strict: fail when ``monitor`` is not logged (otherwise warn once and skip the check).
    :param check_finite: stop as soon as the metric is NaN or infinite.
    :param stopping_threshold: stop as soon as the metric reaches this value (good enough).
    :param divergence_threshold: stop as soon as the metric is worse than this value (hopeless).
    :param check_on_train_epoch_end: check at the end of the training epoch (True) or after each validation
        run (False). By default, at the end of the epoch when validation runs once per epoch at its end,
        else after validation.
    :param verbose: log each improvement.
    :param log_rank_zero_only: in a run of several processes, only process 0 logs the messages (else each process
        logs them, prefixed with ``[rank: N]``).

    The checks are ``trylast`` on ``on_train_epoch_end`` / ``on_validation_end``, so they see what the
    module logged in its own epoch-end hooks. The decision is agreed across processes (any rank stopping
    stops all). ``min_epochs``/``min_steps`` still hold: training continues until they are reached.
    """

    identity = "callback.early-stopping"
    mode_dict = {"min": torch.lt, "max": torch.gt}

    def __init__(self, monitor: str, min_delta: float = 0.0, patience: int = 3, verbose: bool = False,
                 mode: str = "min", strict: bool = True, check_finite: bool = True,
                 stopping_threshold: float | None = None, divergence_threshold: float | None = None,
                 check_on_train_epoch_end: bool | None = None, log_rank_zero_only: bool = False) -> None:
        if mode not in self.mode_dict:
            raise ConfigurationError(f"EarlyStopping(mode={mode!r}): `mode` can be 'min' or 'max', got {mode}.")
        if patience < 0:
            raise ConfigurationError(f"EarlyStopping(patience={patience}) is invalid: expected an integer >= 0.")
        self.monitor = monitor
        self.min_delta = abs(min_delta) if mode == "max" else -abs(min_delta)
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.stopped_epoch = 0
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self._warned = False
        self._reason = EarlyStoppingReason.NOT_STOPPED

    @property
    def monitor_op(self) -> Any:
        return self.mode_dict[self.mode]

    # -- state: kept in checkpoint["plugins"][state_key] by core.checkpoint, saved once and restored once ----
    @property
    def state_key(self) -> str:
        """Where this callback's state is kept in ``checkpoint["plugins"]``: the class name with the monitored
        metric and mode, as Lightning spells it."""
        return f"{type(self).__qualname__}{{'monitor': {self.monitor!r}, 'mode': {self.mode!r}}}"

    @property
    def former_state_keys(self) -> tuple[str, ...]:
        """Keys this state may be under in a checkpoint written by ember's own class (for a subclass) or before
        ``state_key`` took Lightning's form: still restored from."""
        return f"EarlyStopping{{'monitor': {self.monitor!r}, 'mode': {self.mode!r}}}", f"{self.identity}[{self.monitor}]"

    def state_dict(self) -> dict[str, Any]:
        return {"wait_count": self.wait_count, "stopped_epoch": self.stopped_epoch,
                "best_score": float(self.best_score), "patience": self.patience,
                "stopping_reason": self.stopping_reason.value, "stopping_reason_message": self.stopping_reason_message}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count = state["wait_count"]
        self.stopped_epoch = state["stopped_epoch"]
        self.best_score = torch.tensor(state["best_score"])
        self.patience = state["patience"]
        # states saved before the reason was kept have neither key
        self.stopping_reason = EarlyStoppingReason(state.get("stopping_reason", "not_stopped"))
        self.stopping_reason_message = state.get("stopping_reason_message")

    # -- when to check -----------------------------------------------------------------------------------
    @hookimpl
    def setup(self, trainer: Any, stage: str) -> None:
        if self.check_on_train_epoch_end is None:
            cfg = trainer.config
            self._on_epoch_end = cfg.val_check_interval in (None, 1.0) and cfg.check_val_every_n_epoch == 1
        else:
            self._on_epoch_end = self.check_on_train_epoch_end

    def _skip(self, trainer: Any) -> bool:
        return trainer.state.get("fn") != "fit" or trainer.sanity_checking or bool(trainer.config.fast_dev_run)

    @hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: Any) -> None:
        if self._on_epoch_end and not self._skip(trainer):
            self._run_early_stopping_check(trainer)

    @hookimpl(trylast=True)
    def on_validation_end(self, trainer: Any) -> None:
        if not self._on_epoch_end and not self._skip(trainer):
            self._run_early_stopping_check(trainer)

    # -- the check ---------------------------------------------------------------------------------------
    def _run_early_stopping_check(self, trainer: Any) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            message = (f"EarlyStopping monitors {self.monitor!r}, which was not logged. Logged metrics: "
                       f"{', '.join(sorted(trainer.callback_metrics)) or '(none)'}.")
            if self.strict:
                raise ConfigurationError(message + " Log it with self.log, or pass strict=False to skip the check.")
            if not self._warned:
                log.warning(message + " Skipping the check (strict=False).")
                self._warned = True
            return
        self._reason = EarlyStoppingReason.NOT_STOPPED
        should_stop, reason_message = self._evaluate_stopping_criteria(
            torch.as_tensor(value).detach().float().cpu().squeeze())
        should_stop = trainer.reduce_boolean_decision(should_stop, all=False)
        if should_stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason = self._reason
            self.stopping_reason_message = reason_message
        if reason_message and (self.verbose or should_stop):
            self._log_info(trainer, f"EarlyStopping: {reason_message}", self.log_rank_zero_only)

    @staticmethod
    def _log_info(trainer: Any, message: str, log_rank_zero_only: bool) -> None:
        """Log ``message`` at INFO level; with several processes, prefixed by the rank, and (``log_rank_zero_only``)
        on process 0 alone."""
        rank = trainer.global_rank if trainer is not None and trainer.world_size > 1 else None
        if rank is not None:
            if log_rank_zero_only and rank != 0:
                return
            message = f"[rank: {rank}] {message}"
        log.info(message)

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str | None]:
        """Whether to stop, and the message that says why (or that the metric improved); the reason is kept in
        ``_reason``."""
        verdict = self._verdict(current)
        self._reason = verdict[1]
        return verdict[0], verdict[2]

    def _verdict(self, current: torch.Tensor) -> tuple[bool, EarlyStoppingReason, str | None]:
        name, why = self.monitor, EarlyStoppingReason
        if self.check_finite and not torch.isfinite(current):
            return True, why.NON_FINITE_METRIC, (f"{name} = {float(current)} is not finite; the best score was "
                                                 f"{float(self.best_score):.6g}. Stopping.")
        if self.stopping_threshold is not None and self.monitor_op(current, self.stopping_threshold):
            return True, why.STOPPING_THRESHOLD, (
                f"Stopping threshold reached: {name} = {float(current):.6g} "
                f"{'<' if self.mode == 'min' else '>'} {self.stopping_threshold}. Stopping.")
        if self.divergence_threshold is not None and \
                self.monitor_op(-current, -self.divergence_threshold):
            return True, why.DIVERGENCE_THRESHOLD, (
                f"Divergence threshold reached: {name} = {float(current):.6g} is worse than "
                f"{self.divergence_threshold}. Stopping.")
        if self.monitor_op(current - self.min_delta, self.best_score.to(current.device)):
            previous = self.best_score
            self.best_score = current
            self.wait_count = 0
            if math.isfinite(float(previous)):
                return False, why.NOT_STOPPED, (f"{name} improved by {abs(float(previous - current)):.6g} to "
                                                f"{float(current):.6g}.")
            return False, why.NOT_STOPPED, f"{name} improved to {float(current):.6g}."
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return True, why.PATIENCE_EXHAUSTED, (
                f"{name} did not improve in the last {self.wait_count} checks; the best score was "
                f"{float(self.best_score):.6g}. Stopping.")
        return False, why.NOT_STOPPED, None
