"""Which of a run's plugins keep state in checkpoints, and under which key (``checkpoint["plugins"]``); how they are
told of a checkpoint loaded (``on_load_checkpoint``)."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from ember.core.errors import ConfigurationError, warn_user
from ember.core.hooks.positional import is_base_hook

_DEFAULT_STATE_KEY: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _default_state_key(cls: type) -> bool:
    """``cls`` keeps ember.Callback's default ``state_key`` (the identity); looked up once per class, not per save."""
    found = _DEFAULT_STATE_KEY.get(cls)
    if found is None:
        found = _DEFAULT_STATE_KEY[cls] = is_base_hook(getattr(inspect.getattr_static(cls, "state_key", None),
                                                                "fget", None))
    return found


_HAS_STATE: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _has_state(cls: type) -> bool:
    """``cls`` defines ``state_dict`` and ``load_state_dict``: looked up on the class, so that an object that answers
    any attribute (a ``MagicMock`` logger in a test) does not put its answers into checkpoints; once per class, not
    per save (a class's methods are not expected to come or go between saves)."""
    found = _HAS_STATE.get(cls)
    if found is None:
        found = _HAS_STATE[cls] = all(callable(inspect.getattr_static(cls, name, None))
                                      for name in ("state_dict", "load_state_dict"))
    return found


def stateful(trainer: Any, names: dict[str, str] | None = None) -> list[tuple[str, Any]]:
    """The one route of plugin state into and out of checkpoints: every plugin of the run (callbacks,
    plugins, always-on and role plugins, the DataModule) that has Lightning's ``state_dict()`` and
    ``load_state_dict(state)``, with the key its state is kept under in ``checkpoint["plugins"]``: its
    ``state_key`` if it has one, else its identity. Each plugin appears once; two under one key are an
    error (the second would overwrite the first).

    ``names``, if given, receives Lightning's name of each callback's key (every plugin but the role plugins and
    the DataModule) as ``{name: key}``: its ``state_key`` (the class name by default, where ember's key is the
    identity), else its key; when two share a name, the later one has it, as in Lightning."""
    t = trainer
    candidates = list(t.extra_plugins) + list(t.autoload_plugins)
    callbacks = len(candidates)
    candidates += [(t.role_identities[role], plugin) for role, plugin in t.role_plugins.items()]
    if t.datamodule is not None:
        candidates.append(("datamodule", t.datamodule))
    found: dict[str, Any] = {}
    seen: set[int] = set()
    position = -1
    for identity, plugin in candidates:
        position += 1
        if id(plugin) in seen or isinstance(plugin, (type, torch.nn.Module)):
            continue
        seen.add(id(plugin))
        if not _has_state(type(plugin)):
            continue
        default = _default_state_key(type(plugin))
        key = None if default else getattr(plugin, "state_key", None)
        key = key if isinstance(key, str) else identity
        if key in found:
            raise ConfigurationError(
                f"two plugins keep their state under the same checkpoint key {key!r}: {found[key]!r} and "
                f"{plugin!r}. Give one a distinct state_key (or identity) so that each is restored as saved.")
        found[key] = plugin
        if names is not None and position < callbacks:
            name = getattr(plugin, "state_key", None) if default else key
            names[name if isinstance(name, str) else key] = key
    return list(found.items())


def restore(trainer: Any, found: list[tuple[str, Any]], states: Any, path: str | None) -> None:
    """Give each plugin of ``found`` (:func:`stateful`'s answer) its state from ``states`` (a checkpoint's
    ``plugins``), under its key or one of its ``former_state_keys``; warn about states no plugin took."""
    restored = set()
    for key, plugin in found:
        # a plugin whose key changed names the keys it had before, so older checkpoints still restore it
        former = getattr(plugin, "former_state_keys", ())
        if key not in states and isinstance(former, tuple):
            key = next((k for k in former if k in states), key)
        if key in states:
            plugin.load_state_dict(states[key])
            restored.add(key)
    left = sorted(k for k, v in states.items() if k not in restored and v) if isinstance(states, Mapping) else []
    if left and trainer.is_global_zero:
        warn_user(f"{path} holds the state of {', '.join(left)}, which this Trainer does not have: that state "
                  "is not restored. When resuming with ckpt_path, pass the callbacks and plugins that wrote "
                  "the checkpoint to the Trainer again (callbacks=[...]) to continue with their state.")


def on_load_checkpoint(trainer: Any, checkpoint: dict[str, Any], module: bool) -> None:
    """``on_load_checkpoint`` in its two parts, as Lightning calls it: the module's alone (``module``), before its
    weights are loaded from the checkpoint (which it may change); every other plugin's (wrappers included) after."""
    t, the_module = trainer, trainer.module
    if t.hook.on_load_checkpoint is not None:
        keep = (lambda p: p is the_module) if module else (lambda p: p is not the_module)
        t.hook.call_some("on_load_checkpoint", keep, trainer=t, module=the_module, checkpoint=checkpoint)
