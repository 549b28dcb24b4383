"""``lightning.pytorch.utilities.parsing``: ``AttributeDict`` and the attribute look-ups the tuner uses, which
search the module, then its ``hparams``, then its DataModule."""

from __future__ import annotations

from typing import Any

from ember.lightning.pytorch.utilities import AttributeDict, is_picklable

__all__ = ["AttributeDict", "is_picklable", "lightning_getattr", "lightning_hasattr", "lightning_setattr"]


def _holders(model: Any, attribute: str) -> list[Any]:
    """The objects that hold ``attribute``: the module, its hparams (by key or attribute), its DataModule."""
    found: list[Any] = []
    if hasattr(model, attribute):
        found.append(model)
    hparams = getattr(model, "hparams", None)
    if isinstance(hparams, dict) and attribute in hparams:
        found.append(hparams)
    elif hparams is not None and not isinstance(hparams, dict) and hasattr(hparams, attribute):
        found.append(hparams)
    trainer = getattr(model, "__dict__", {}).get("_trainer")
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and hasattr(datamodule, attribute):
        found.append(datamodule)
    return found


def lightning_hasattr(model: Any, attribute: str) -> bool:
    """Whether the module, its ``hparams`` or its DataModule has ``attribute``."""
    return bool(_holders(model, attribute))


def lightning_getattr(model: Any, attribute: str) -> Any:
    """``attribute`` from the first of the module, its ``hparams``, its DataModule that has it."""
    holders = _holders(model, attribute)
    if not holders:
        raise AttributeError(f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict,"
                             " nor the datamodule.")
    holder = holders[0]
    return holder[attribute] if isinstance(holder, dict) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Set ``attribute`` wherever the module, its ``hparams`` or its DataModule holds it."""
    holders = _holders(model, attribute)
    if not holders:
        raise AttributeError(f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict,"
                             " nor the datamodule.")
    for holder in holders:
        if isinstance(holder, dict):
            holder[attribute] = value
        else:
            setattr(holder, attribute, value)
