"""Configuration hooks: the few hooks that shape a run before it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from ember.hookspecs.options import OptionRegistry
    from ember.hookspecs.trainer import TrainerLike


@hookspec
def configure(trainer: TrainerLike) -> None:
    """Check or adjust the configuration of a run.

    Called once per ``fit``/``validate``/``test``/``predict`` call, after the run's plugins are registered and
    before anything else, on every rank. Raise ``ember.ConfigurationError`` to reject the configuration: the
    message should name the argument, the value and what is allowed. ``trainer.config`` is the validated,
    frozen Trainer configuration.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    """


@hookspec
def add_options(options: OptionRegistry) -> None:
    """Declare the Trainer arguments this plugin owns (like pytest's ``pytest_addoption``).

    Called once per process and set of installed plugins, on the plugin's class (implement it as a
    ``@staticmethod``), before any Trainer argument is checked: ``options.add(name, type=..., default=...,
    help=..., validate=..., switches=...)`` declares an argument, ``options.default_of(role)`` makes this plugin
    the one ``Trainer(<role>=True)`` selects. The Trainer then accepts the argument, checks it with
    ``validate`` (raise ``ember.ConfigurationError`` naming the argument, the value and what is allowed) and
    exposes it as ``trainer.config.<name>``; ``switches`` makes a value other than False/None switch this
    plugin on. ``ember.core.hooks.options.declared_options()`` lists every declared argument.

    :ranks: every process, once per set of installed plugins, outside any run
    :wrap: no: called once per plugin class, each with a registry of its own
    :param options: the registry to declare the arguments in.
    """
