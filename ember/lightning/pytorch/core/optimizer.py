"""``lightning.pytorch.core.optimizer``: ``LightningOptimizer`` is the class of what ``self.optimizers()``
returns (:class:`ember.core.loop.optim.ManualOptimizer`: ``step()`` runs the precision's and strategy's step
and ``on_before_optimizer_step``).

The underscored functions are Lightning's names for reading ``configure_optimizers()``'s answer, which code and
tests written for Lightning call directly; each runs ember's own reader (:mod:`ember.core.loop.optim`), the one
the Trainer uses, so they raise and warn as a fit would."""

from __future__ import annotations

import warnings
from typing import Any

from ember.core.loop import optim
from ember.core.loop.module_overrides import overridden
from ember.core.loop.training import ManualOptimizer as LightningOptimizer

__all__ = ["LightningOptimizer", "do_nothing_closure"]

_WHERE = "configure_optimizers()"


def do_nothing_closure() -> None:
    """A closure for ``optimizer.step(closure)`` that computes nothing."""


def _configure_optimizers(optim_conf: Any) -> tuple[list, list, str | None]:
    """The optimizers, the schedulers as given (objects or dicts) and the monitor of ``optim_conf``."""
    optimizers, schedulers = optim.read_answer(optim_conf, lambda scheduler, where: scheduler)
    monitor = optim_conf.get("monitor") if isinstance(optim_conf, dict) else None
    return optimizers, schedulers, monitor


def _configure_schedulers_automatic_opt(schedulers: list, monitor: str | None) -> list[optim.SchedulerConfig]:
    """Scheduler configs under automatic optimization (``monitor``: the one given beside the optimizer)."""
    def read(scheduler: Any) -> optim.SchedulerConfig:
        if monitor is not None:
            scheduler = dict(scheduler if isinstance(scheduler, dict) else {"scheduler": scheduler})
            scheduler.setdefault("monitor", monitor)
        return optim.scheduler_config(scheduler, _WHERE)

    return [read(s) for s in schedulers]


def _configure_schedulers_manual_opt(schedulers: list) -> list[optim.SchedulerConfig]:
    """Scheduler configs under manual optimization (the module steps them)."""
    return [optim.manual_scheduler_config(s, _WHERE) for s in schedulers]


def _validate_scheduler_api(lr_scheduler_configs: list[optim.SchedulerConfig], model: Any) -> None:
    """Refuse schedulers checkpoints cannot save or the loop cannot step (as a fit would, before its first batch)."""
    optim.validate_schedulers(lr_scheduler_configs, getattr(model, "automatic_optimization", True),
                              overridden(model, "lr_scheduler_step") is not None)


def _init_optimizers_and_lr_schedulers(model: Any) -> tuple[list, list[optim.SchedulerConfig]]:
    """Call ``model.configure_optimizers()`` and read and check its answer as the Trainer does at a fit's start."""
    automatic = getattr(model, "automatic_optimization", True)
    answer = model.configure_optimizers()
    if answer is None:
        warnings.warn("configure_optimizers() returned None: this fit will run with no optimizer.", UserWarning,
                      stacklevel=2)
    optimizers, configs = optim.parse_optimizers(answer, automatic)
    _validate_scheduler_api(configs, model)
    return optimizers, configs
