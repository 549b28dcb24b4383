"""The hook contract: every hook ember's loop calls, as pluggy specifications.

Three families, each split by phase into modules under about 500 lines:

* :mod:`ember.hookspecs.events` -- Lightning's callback/module events, broadcast to every plugin
  (``events.fit``, ``events.evaluation``, ``events.checkpoints``).
* :mod:`ember.hookspecs.roles` -- the work of the accelerator, precision, strategy and checkpoint-storage
  roles, answered by the active plugin of the role (``firstresult``) and wrappable by any plugin
  (``roles.compute``, ``roles.distributed``, ``roles.storage``).
* :mod:`ember.hookspecs.config` -- the few configuration hooks.

Every hook's ``trainer`` argument is a :class:`~ember.hookspecs.trainer.TrainerLike`: what a plugin may use
of the trainer. Every spec states on which ranks it runs (``:ranks:``) and whether it may be wrapped
(``:wrap:``).

This package imports nothing of ember and no torch at import time, so it is cheap to import.
"""

from __future__ import annotations

from ember.hookspecs.markers import PROJECT, hookimpl, hookspec
from ember.hookspecs.options import OptionRegistry
from ember.hookspecs.trainer import TrainerLike

__all__ = ["PROJECT", "OptionRegistry", "TrainerLike", "hookimpl", "hookspec", "spec_modules"]


def spec_modules() -> list:
    """The modules holding the specs, in documentation order."""
    from ember.hookspecs import config, events, roles

    return [events, roles, config]
