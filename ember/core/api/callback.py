"""``ember.Callback``: the base of Lightning-style callbacks.

Its event methods take the hook's arguments by position, ``(self, trainer, pl_module, ...)``, with any
parameter names, as Lightning's ``Callback`` does; every hook is present as a no-op so that an override may
call ``super()``. The no-ops are never registered, so a callback costs only the hooks it overrides. A plain
object with ``@ember.hookimpl`` methods needs no base class and receives its arguments by name.
"""

from __future__ import annotations

from ember.core.hooks.plugin_manager import EVENT_HOOKS
from ember.core.hooks.positional import STYLE_ATTR, add_base_hooks


class Callback:
    """Subclass and override the event hooks you need (``on_train_batch_end(self, trainer, pl_module, outputs,
    batch, batch_idx)``, ...); pass instances in ``Trainer(callbacks=[...])``. A callback that defines
    ``state_dict()`` and ``load_state_dict(state)`` has its state saved in checkpoints (under its identity)."""

    def state_dict(self) -> dict:
        """The callback's state for checkpoints (override; the default keeps none)."""
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` returned (override)."""


setattr(Callback, STYLE_ATTR, "callback")
add_base_hooks(Callback, sorted(EVENT_HOOKS - {"prepare_data", "configure_model"}))
