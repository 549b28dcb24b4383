"""The role plugins a Trainer selected, seen from outside a hook call: the device a run will use before it starts
(``trainer.root_device``), and which Trainer a plugin object belongs to (:func:`trainer_of`), so that an object
code holds (``trainer.strategy``) can answer with the run's state when asked."""

from __future__ import annotations

import contextlib
import inspect
import weakref
from typing import Any

import torch

from ember.core.hooks.class_hooks import IMPL_MARK, class_hooks


def planned_root_device(trainer: Any) -> torch.device:
    """The device this process will run on, as far as it is known once the Trainer is built (``trainer.root_device``
    before a run, as in Lightning): the selected strategy's or accelerator's ``root_device`` hook, at local rank 0.
    Each run asks the hook again once its processes are started; a hook that cannot answer yet leaves the CPU."""
    for role in ("strategy", "accelerator"):
        fn = _implementation_of(trainer.role_plugins.get(role), "root_device")
        if fn is None:
            continue
        try:  # as pluggy calls it: by position (the spec's one argument, when the implementation takes it)
            device = fn(*([trainer] if inspect.signature(fn).parameters else []))
        except Exception:  # noqa: BLE001 - e.g. a strategy that needs its process group: the run asks again
            break
        if device is not None:
            return device  # type: ignore[no-any-return]
    return torch.device("cpu")


def _implementation_of(plugin: Any, hook: str) -> Any:
    """The bound method of ``plugin`` marked ``@hookimpl`` for ``hook``, under the hook's name or another one
    (``specname=``: a strategy's ``root_device`` attribute is Lightning's property, see ``trainer_of``)."""
    if plugin is None:
        return None
    for name, (_, opts) in class_hooks(type(plugin)).marked.items():
        if (opts.get("specname") or name) == hook:
            return getattr(plugin, name)
    fn = getattr(plugin, hook, None) if not isinstance(inspect.getattr_static(plugin, hook, None), property) else None
    return fn if callable(fn) and getattr(fn, IMPL_MARK, None) is not None else None


#: The Trainer that selected each role plugin, weakly held both ways (see trainer_of).
_SELECTED_BY: weakref.WeakKeyDictionary[Any, weakref.ReferenceType] = weakref.WeakKeyDictionary()


def note_selected(plugin: Any, trainer: Any) -> None:
    """Record that ``trainer`` selected ``plugin`` for one of its roles (a plugin that cannot be weakly referenced,
    or hashed, is not recorded)."""
    with contextlib.suppress(TypeError):
        _SELECTED_BY[plugin] = weakref.ref(trainer)


def trainer_of(plugin: Any) -> Any:
    """The Trainer that last selected ``plugin`` as its accelerator, strategy, precision, ... (None when none did, or
    it is gone): how a plugin object answers code that holds it outside a hook call (``trainer.strategy.root_device``)
    without keeping its Trainer alive or pickling it."""
    try:
        ref = _SELECTED_BY.get(plugin)
    except TypeError:
        return None
    return ref() if ref is not None else None


class RolesView:
    """The roles a Trainer chose, read-only, as Lightning code reads them from Lightning's private
    ``trainer._accelerator_connector``: ``strategy``, ``accelerator``, ``precision_plugin``, and ``is_distributed``
    (the strategy, or the ember plugin a Lightning-named one configures, runs over a process group)."""

    __slots__ = ("strategy", "accelerator", "precision_plugin", "is_distributed")

    def __init__(self, trainer: Any) -> None:
        strategy = trainer.strategy
        distributed = getattr(strategy, "is_distributed", None)
        if distributed is None:
            distributed = getattr(getattr(strategy, "plugin", None), "is_distributed", False)
        for name, value in zip(self.__slots__, (strategy, trainer.accelerator, trainer.precision_plugin,
                                                bool(distributed))):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"trainer._accelerator_connector.{name} cannot be set: ember chooses the roles from the "
                             "Trainer's arguments (strategy=, accelerator=, precision=, plugins=); build a Trainer "
                             "with the one you want.")
