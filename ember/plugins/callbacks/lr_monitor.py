"""``callback.lr-monitor``: log each optimizer's learning rate (and optionally momentum, weight decay)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl


class LearningRateMonitor:
    """Log ``lr-<Optimizer>`` (``lr-<Optimizer>/pg<i>`` with several parameter groups, ``lr-<name>`` for a
    scheduler given a ``name``) through the Trainer's logging, so the values reach every logger at the
    ``log_every_n_steps`` cadence and ``trainer.callback_metrics``.

    :param logging_interval: ``"step"`` (before every optimizer step), ``"epoch"`` (at the start of each
        epoch), or None: per step if any scheduler steps per step, else per epoch.
    :param log_momentum: also log ``momentum-<Optimizer>`` (``betas[0]`` for Adam-style optimizers).
    :param log_weight_decay: also log ``weight_decay-<Optimizer>``.

    The values are Python floats read from the optimizers' parameter groups: no device synchronisation. After a
    fit, ``lrs`` holds every learning rate logged, per name (Lightning's attribute), and ``last_momentum_values``
    and ``last_weight_decay_values`` the last momentum and weight decay logged per name (None when not logged).
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
        self._names: list[tuple[Any, list[str]]] = []
        self._interval = "epoch"
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    @hookimpl
    def on_train_start(self, trainer: Any) -> None:
        configs = {id(c.scheduler.optimizer): c for c in trainer.lr_scheduler_configs
                   if getattr(c.scheduler, "optimizer", None) is not None}
        if self.logging_interval is not None:
            self._interval = self.logging_interval
        else:
            self._interval = "step" if any(c.interval == "step" for c in trainer.lr_scheduler_configs) else "epoch"
        seen: Counter[str] = Counter()
        self._names = []
        for opt in trainer.optimizers:
            config = configs.get(id(opt))
            base = (config.name if config is not None and config.name else type(opt).__name__)
            seen[base] += 1
            if seen[base] > 1:
                base = f"{base}-{seen[base] - 1}"
            groups = opt.param_groups
            names = [base if len(groups) == 1 else f"{base}/pg{i + 1}" for i in range(len(groups))]
            self._names.append((opt, names))
        every = [name for _, names in self._names for name in names]
        self.lrs = {f"lr-{name}": [] for name in every}
        self.last_momentum_values = {f"lr-{name}-momentum": None for name in every}
        self.last_weight_decay_values = {f"lr-{name}-weight_decay": None for name in every}

    @hookimpl
    def on_train_batch_start(self, trainer: Any) -> None:
        if self._interval == "step":
            self._log(trainer, on_step=True)

    @hookimpl
    def on_train_epoch_start(self, trainer: Any) -> None:
        if self._interval == "epoch":
            self._log(trainer, on_step=False)

    def _log(self, trainer: Any, on_step: bool) -> None:
        for opt, names in self._names:
            for group, name in zip(opt.param_groups, names, strict=True):
                stats = {f"lr-{name}": group["lr"]}
                self.lrs.setdefault(f"lr-{name}", []).append(float(group["lr"]))
                if self.log_momentum:
                    momentum = group.get("betas", (group.get("momentum", 0.0),))[0]
                    stats[f"lr-{name}-momentum"] = self.last_momentum_values[f"lr-{name}-momentum"] = float(momentum)
                if self.log_weight_decay:
                    decay = float(group.get("weight_decay", 0.0))
                    stats[f"lr-{name}-weight_decay"] = self.last_weight_decay_values[f"lr-{name}-weight_decay"] = decay
                for key, value in stats.items():
                    trainer.log(key, float(value), on_step=on_step, on_epoch=not on_step)
