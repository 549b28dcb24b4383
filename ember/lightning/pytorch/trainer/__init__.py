"""``lightning.pytorch.trainer``: the Trainer (ember's) and ``trainer.states``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.core.loop.seed import seed_everything

if TYPE_CHECKING:
    from ember.core.api.trainer import Trainer  # given by __getattr__: see ember.lightning._names.lightning_trainer

__all__ = ["Trainer", "seed_everything"]


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from ember.lightning._names import lightning_trainer

        return lightning_trainer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
