"""``lightning.fabric.accelerators.mps``: ``MPSAccelerator`` (:class:`ember.lightning.pytorch.accelerators.MPSAccelerator`)
and the list of MPS devices, through which a Trainer taken by Lightning's names counts them: code that fakes an MPS
device patches ``MPSAccelerator.is_available`` or ``_get_all_available_mps_gpus`` (Lightning's test helpers do both).
"""

from __future__ import annotations

from ember.lightning.pytorch.accelerators.mps import MPSAccelerator

__all__ = ["MPSAccelerator"]


def _get_all_available_mps_gpus() -> list[int]:
    """``[0]`` when :meth:`MPSAccelerator.is_available` (looked up when called), else ``[]``."""
    return [0] if MPSAccelerator.is_available() else []
