"""The learning-rate schedulers' steps within a fit: each scheduler config's interval and frequency, and
ReduceLROnPlateau's monitored metric (an error when it is missing, or a warning and no step with ``strict=False``)."""

from __future__ import annotations

from typing import Any, Protocol

from ember.core.errors import ConfigurationError, warn_user


class TrainingLoop(Protocol):
    """What the steps read of ``ember.core.loop.training.TrainingLoop``."""

    t: Any  # the Trainer: lr_scheduler_configs, callback_metrics
    loop: Any  # the Loops: views.fit.epoch_loop (a plateau scheduler's monitor), log_context (no self.log in
    # lr_scheduler_step)
    progress: Any  # batch_idx, current_epoch
    overrides: Any  # the module's lr_scheduler_step, when it overrides it


def step(training: TrainingLoop, interval: str, plateau: bool | None = None) -> None:
    """Step the schedulers of ``interval`` ('step' or 'epoch') that are due; ReduceLROnPlateau ones per step
    here, per epoch by :func:`step_plateau` once the epoch's metrics are in. ``plateau``: True for the
    ReduceLROnPlateau ones only, False for the others only (the loop steps a batch's plateau schedulers after
    its ``on_train_batch_end`` and validation, so that they see what those logged, as in Lightning)."""
    p = training.progress
    # as in Lightning, a per-step frequency counts the epoch's batches (that step), not global_step
    counter = p.batch_idx + 1 if interval == "step" else p.current_epoch + 1
    for config in training.t.lr_scheduler_configs:
        if config.interval != interval or counter % config.frequency or plateau is not None and \
                plateau is not config.reduce_on_plateau:
            continue
        if config.reduce_on_plateau:
            if interval == "step":
                _plateau(training, config)
            continue
        if training.overrides.lr_scheduler_step is not None:  # no self.log inside (Lightning)
            training.loop.log_context.call_refusing("lr_scheduler_step", training.overrides.lr_scheduler_step,
                                                    config.scheduler, None)
        else:
            config.scheduler.step()


def step_plateau(training: TrainingLoop, interval: str) -> None:
    """Step the ReduceLROnPlateau schedulers of ``interval`` that are due, with their monitored metric."""
    epoch = training.progress.current_epoch
    for config in training.t.lr_scheduler_configs:
        if config.reduce_on_plateau and config.interval == interval and (epoch + 1) % config.frequency == 0:
            _plateau(training, config)


def _plateau(training: TrainingLoop, config: Any) -> None:
    # read through the fit loop's view, as Lightning's epoch loop reads it, so that code which replaces
    # ``trainer.fit_loop.epoch_loop._get_monitor_value`` (to record or adjust what the scheduler sees) is heard
    value = training.loop.views.fit.epoch_loop.monitor_value(config.monitor)
    metrics = training.t.callback_metrics
    if value is None:
        if config.strict:
            raise ConfigurationError(
                f"the ReduceLROnPlateau scheduler monitors {config.monitor!r}, which was not logged "
                f"(ReduceLROnPlateau conditioned on metric {config.monitor!r} which is not available. Available "
                f"metrics are: {sorted(metrics) or '(none)'}). Log it with self.log, or set 'strict': False in the "
                "lr_scheduler dict to skip the step instead.")
        warn_user(f"the ReduceLROnPlateau scheduler monitors {config.monitor!r}, which was not logged: "
                  f"ReduceLROnPlateau conditioned on metric {config.monitor!r} which is not available but strict "
                  f"is set to False, so its step is skipped (available metrics: {sorted(metrics) or '(none)'}). "
                  "Log the metric with self.log, or monitor one that is logged.", RuntimeWarning)
        return
    if training.overrides.lr_scheduler_step is not None:
        training.loop.log_context.call_refusing("lr_scheduler_step", training.overrides.lr_scheduler_step,
                                                config.scheduler, value)
    else:
        config.scheduler.step(float(value))
