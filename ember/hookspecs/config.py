"""Configuration hooks: the few hooks that shape a run before it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from ember.core.trainer import Trainer


@hookspec
def configure(trainer: Trainer) -> None:
    """Check or adjust the configuration of a run.

    Called once per ``fit``/``validate``/``test``/``predict`` call, after the run's plugins are registered and
    before anything else, on every rank. Raise ``ember.ConfigurationError`` to reject the configuration: the
    message should name the argument, the value and what is allowed. ``trainer.config`` is the validated,
    frozen Trainer configuration.

    :param trainer: the trainer.
    """
