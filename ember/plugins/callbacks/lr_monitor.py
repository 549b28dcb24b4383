"""``callback.lr-monitor``: log each optimizer's learning rate (and optionally momentum, weight decay)."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl


class LearningRateMonitor:
    """Log every parameter group's learning rate through the Trainer's logging, so the values reach every logger
    and ``trainer.callback_metrics``.

    Names: ``lr-<Optimizer>`` (``lr-<Optimizer>-1``, ``-2``, ... for further optimizers of the same class), the
    scheduler's ``name`` as it is when its configuration gives one; with several parameter groups
    ``<name>/pg1``, ``<name>/pg2``, ... (or ``<name>/<group name>`` for a group with a ``"name"`` key; a single
    group with a ``"name"`` gets it too). When parameter groups are added during a fit (fine-tuning), the values
    logged so far under ``<name>`` continue under ``<name>/pg1``.

    :param logging_interval: ``"step"`` (before the training batches whose step metrics are written, every
        ``log_every_n_steps`` batches that step an optimizer), ``"epoch"`` (at the start of each epoch), or None:
        each scheduler's optimizer at its scheduler's interval, optimizers without a scheduler at both.
    :param log_momentum: also log ``<name>-momentum`` (``betas[0]`` for Adam-style optimizers, 0 for optimizers
        without momentum, which a ``RuntimeWarning`` points out).
    :param log_weight_decay: also log ``<name>-weight_decay``.

    The Trainer needs a logger. The values are Python floats read from the optimizers' parameter groups: no device
    synchronisation. ``lrs`` holds every learning rate logged, per name, and ``last_momentum_values`` and
    ``last_weight_decay_values`` the last momentum and weight decay logged per name (None when not logged).
    """

    identity = "callback.lr-monitor"

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False,
                 log_weight_decay: bool = False) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise ConfigurationError(f"LearningRateMonitor(logging_interval={logging_interval!r}) is invalid: "
                                     "expected 'step', 'epoch' or None.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}
        self._stepped = 0  # training batches that stepped an optimizer: the step logging's cadence
        self._step_before = 0

    @hookimpl
    def on_train_start(self, trainer: Any) -> None:
        if not trainer.loggers:
            raise ConfigurationError("LearningRateMonitor was given to a `Trainer` that has no logger: pass a "
                                     "logger, or leave the callback out.")
        if self.log_momentum:
            optimizers = ([c.scheduler.optimizer for c in trainer.lr_scheduler_configs]
                          if trainer.lr_scheduler_configs else list(trainer.optimizers))
            if any("momentum" not in _inner(o).defaults and "betas" not in _inner(o).defaults for o in optimizers):
                warnings.warn("LearningRateMonitor(log_momentum=True): some optimizers do not have momentum. "
                              "Their momentum is logged as 0.", RuntimeWarning, stacklevel=2)
        self._stepped = trainer.global_step
        names = [name for _, group_names, _ in self._entries(trainer) for name in group_names]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}

    @hookimpl
    def on_train_batch_start(self, trainer: Any) -> None:
        self._step_before = trainer.global_step
        if self.logging_interval == "epoch":
            return
        every = trainer.log_every_n_steps
        if (self._stepped + 1) % every == 0 or trainer.should_stop:
            self._log(trainer, "step" if self.logging_interval is None else None, on_step=True)

    @hookimpl
    def on_train_batch_end(self, trainer: Any) -> None:
        if trainer.global_step != self._step_before:
            self._stepped += 1

    @hookimpl
    def on_train_epoch_start(self, trainer: Any) -> None:
        if self.logging_interval != "step":
            self._log(trainer, "epoch" if self.logging_interval is None else None, on_step=False)

    def _entries(self, trainer: Any) -> list[tuple[Any, list[str], str | None]]:
        """(optimizer, a name per parameter group, its scheduler's interval or None): the optimizers of the
        schedulers first, in the schedulers' order, then the optimizers without a scheduler."""
        entries: list[tuple[Any, list[str], str | None]] = []
        seen: list[Any] = []
        of_class: Counter[type] = Counter()
        for config in trainer.lr_scheduler_configs:
            opt = _inner(config.scheduler.optimizer)
            entries.append((opt, _group_names(opt, config.name, seen, of_class), config.interval))
        for opt in map(_inner, trainer.optimizers):
            if not any(opt is other for other in seen):
                entries.append((opt, _group_names(opt, None, seen, of_class), None))
        return entries

    def _log(self, trainer: Any, interval: str | None, on_step: bool) -> None:
        """Log the optimizers of schedulers stepping at ``interval`` (all where None) and those without one."""
        entries = self._entries(trainer)
        self._carry_over([name for _, names, _ in entries for name in names])
        for opt, names, sched_interval in entries:
            if sched_interval is not None and interval is not None and sched_interval != interval:
                continue
            betas = "betas" in opt.defaults
            for group, name in zip(opt.param_groups, names, strict=True):
                stats = {name: float(group["lr"])}
                self.lrs[name].append(stats[name])
                if self.log_momentum:
                    momentum = group["betas"][0] if betas else group.get("momentum", 0.0)
                    stats[f"{name}-momentum"] = self.last_momentum_values[f"{name}-momentum"] = float(momentum)
                if self.log_weight_decay:
                    decay = float(group.get("weight_decay", 0.0))
                    stats[f"{name}-weight_decay"] = self.last_weight_decay_values[f"{name}-weight_decay"] = decay
                for key, value in stats.items():
                    trainer.log(key, value, on_step=on_step, on_epoch=not on_step)

    def _carry_over(self, names: list[str]) -> None:
        """Give ``lrs`` a list per name: a new name is added at the end, and an optimizer that now has several
        parameter groups moves the list of its single group to the end as ``<name>/pg1``."""
        for name in names:
            if name.endswith("/pg1") and name[:-4] in self.lrs:
                self.lrs[name] = self.lrs.pop(name[:-4])
            elif name not in self.lrs:
                self.lrs[name] = []


def _inner(opt: Any) -> Any:
    """The torch optimizer of a wrapper (a DeepSpeed or a Lightning-style wrapped optimizer), or ``opt``."""
    inner = getattr(opt, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "param_groups") else opt


def _group_names(opt: Any, scheduler_name: str | None, seen: list[Any], of_class: Counter[type]) -> list[str]:
    seen.append(opt)
    if scheduler_name is None:
        of_class[type(opt)] += 1
    base = scheduler_name if scheduler_name is not None else f"lr-{type(opt).__name__}"
    if of_class[type(opt)] > 1:
        base = f"{base}-{of_class[type(opt)] - 1}"
    groups = opt.param_groups
    labels = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigurationError(f"A single `Optimizer` cannot have multiple parameter groups with identical `name` "
                                 f"values: {base} repeats {', '.join(map(repr, repeated))}. Give each group its own "
                                 "name.")
    if len(groups) > 1:
        return [f"{base}/{label}" for label in labels]
    return [f"{base}/{groups[0]['name']}" if groups[0].get("name") else base]
