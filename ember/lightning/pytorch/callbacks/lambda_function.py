"""``LambdaCallback``: a callback made of functions, one per hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.core.api.callback import Callback
from ember.core.hooks.plugin_manager import EVENT_HOOKS


class LambdaCallback(Callback):
    """``LambdaCallback(on_train_epoch_end=lambda trainer, pl_module: ..., ...)``: each keyword names an event
    hook and gives the function to call there, with the hook's arguments by position, as a Callback method gets
    them (``trainer, pl_module, ...``). An unknown hook name is an error."""

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        allowed = EVENT_HOOKS | {"state_dict", "load_state_dict"}
        for name, function in hooks.items():
            if name not in allowed:
                known = sorted(h for h in allowed if h.startswith("on_") or h in ("setup", "teardown"))
                raise TypeError(f"LambdaCallback({name}=...): no hook has that name; hooks: {', '.join(known)}.")
            if function is not None:
                setattr(self, name, function)


__all__ = ["LambdaCallback"]
