"""``lightning.fabric``'s names that Lightning Trainer code imports: its utilities (warnings, exceptions, seeding,
data helpers, rank-zero helpers), each the object ``ember.lightning.pytorch`` gives under the same name, and its
accelerators (the classes, and the device counts that code patches to fake GPUs).

Lightning Fabric itself (the ``Fabric`` class, a loop the user writes) is not part of ember: ``Fabric`` exists so
that an import of it works, and raises on use, naming what to use instead.
"""

from __future__ import annotations

from typing import Any

from ember.core.loop.seed import seed_everything

__all__ = ["Fabric", "seed_everything"]

#: Sub-packages reachable as attributes (``lightning.fabric.accelerators.cuda``), imported on first use.
_SUBMODULES = ("accelerators", "utilities")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Fabric:
    """A stand-in: constructing it raises, since ember has no Fabric (write the loop as a ``LightningModule`` and
    run it with ``ember.Trainer``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "Lightning Fabric is not part of ember: move the loop into a LightningModule's training_step and run it "
            "with ember.Trainer (import ember.lightning.pytorch as pl; pl.Trainer).")
