"""``ember.Callback``: the base of Lightning-style callbacks.

Its event methods take the hook's arguments by position, ``(self, trainer, pl_module, ...)``, with any
parameter names, as Lightning's ``Callback`` does; every hook Lightning's ``Callback`` has is present as a no-op
so that an override may call ``super()``. The no-ops are never registered, so a callback costs only the hooks it overrides. A plain
object with ``@ember.hookimpl`` methods needs no base class and receives its arguments by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember.core.api import logging_api
from ember.core.hooks.plugin_manager import EVENT_HOOKS
from ember.core.hooks.positional import STYLE_ATTR, add_base_hooks, base_hook


class Callback:
    """Subclass and override the event hooks you need (``on_train_batch_end(self, trainer, pl_module, outputs,
    batch, batch_idx)``, ...); pass instances in ``Trainer(callbacks=[...])``. A callback that defines
    ``state_dict()`` and ``load_state_dict(state)`` has its state saved in checkpoints (under its identity)."""

    @property
    def state_key(self) -> str:
        """The key of this callback's state in checkpoints. Lightning's default is the class name; in ember a
        callback that does not override this property is kept under its identity instead (unique per Trainer, so
        two callbacks of one class are both kept). Override it (``self._generate_state_key(monitor=...)``) to
        choose the key."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """``ClassName{kwargs}``: a state key that tells apart instances of one class built with other arguments."""
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict:
        """The callback's state for checkpoints (override; the default keeps none)."""
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` returned (override)."""

    def log(self, name: str, value: Any, **kwargs: Any) -> None:
        """``pl_module.log`` from the callback's own hooks: the running trainer's module records the value, with
        ``self.log``'s arguments and defaults (per step in batch hooks, per epoch in the others)."""
        _module_of_run(f"self.log({name!r})").log(name, value, **kwargs)

    def log_dict(self, dictionary: Mapping[str, Any], **kwargs: Any) -> None:
        """``pl_module.log_dict`` from the callback's own hooks (see :meth:`log`)."""
        _module_of_run(f"self.log_dict({list(dictionary)!r})").log_dict(dictionary, **kwargs)


class _PlainLog:
    """``self.log`` of a module without one (any ``nn.Module``): ``ember.log``."""

    log = staticmethod(logging_api.log)
    log_dict = staticmethod(logging_api.log_dict)


def _module_of_run(call: str) -> Any:
    trainer = logging_api.running_trainer()
    if trainer is None:
        raise RuntimeError(f"{call} was called from a callback outside a running trainer: call it from one of the "
                           "callback's hooks while trainer.fit, validate or test runs.")
    module = trainer.module
    return module if callable(getattr(module, "log", None)) else _PlainLog


base_hook(Callback.state_key.fget)  # type: ignore[attr-defined]  # (a default: the identity is used instead)
setattr(Callback, STYLE_ATTR, "callback")
#: Hooks of Lightning's module and DataModule that its ``Callback`` class does not define: a callback may implement
#: them, but gets no base method, so that the class shows Lightning's set of methods (code that wraps every method
#: of a callback, as Lightning's tests do, wraps the same ones).
MODULE_ONLY = frozenset({"prepare_data", "configure_model", "on_before_batch_transfer", "on_after_batch_transfer",
                         "on_validation_model_eval", "on_validation_model_train", "on_validation_model_zero_grad",
                         "on_test_model_eval", "on_test_model_train", "on_predict_model_eval"})
add_base_hooks(Callback, sorted(EVENT_HOOKS - MODULE_ONLY))
