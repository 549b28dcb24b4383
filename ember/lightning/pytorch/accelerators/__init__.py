"""``lightning.pytorch.accelerators``'s classes as ember plugins (see :mod:`ember.lightning.seed`), one module each
as in Lightning (``.accelerator``, ``.cpu``, ``.cuda``, ``.mps``, ``.xla``).

``Trainer(accelerator=CPUAccelerator())`` runs as ``accelerator="cpu"``; ``isinstance(trainer.accelerator,
CUDAAccelerator)`` holds for ember's ``accelerator.cuda``. Device counts go through
:mod:`ember.lightning.fabric.accelerators` (``num_cuda_devices``), where code that fakes them patches.
"""

from __future__ import annotations

from ember.lightning.fabric.accelerators.cuda import find_usable_cuda_devices
from ember.lightning.pytorch.accelerators.accelerator import Accelerator
from ember.lightning.pytorch.accelerators.cpu import CPUAccelerator
from ember.lightning.pytorch.accelerators.cuda import CUDAAccelerator
from ember.lightning.pytorch.accelerators.mps import MPSAccelerator
from ember.lightning.pytorch.accelerators.xla import XLAAccelerator

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "XLAAccelerator",
           "find_usable_cuda_devices"]
