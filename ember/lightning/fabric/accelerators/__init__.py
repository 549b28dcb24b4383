"""``lightning.fabric.accelerators``: Lightning's accelerator classes (ember's, see
:mod:`ember.lightning.pytorch.accelerators`) and the device counts a Trainer taken through Lightning's names reads.

``cuda.num_cuda_devices`` and ``mps._get_all_available_mps_gpus`` (with ``mps.MPSAccelerator.is_available``) are
looked up each time such a Trainer counts devices (:func:`route_device_counts`), so patching them fakes GPUs for
building a Trainer, as Lightning's own tests and many projects' do.
"""

from __future__ import annotations

from ember.lightning.fabric.accelerators import cpu, cuda, mps
from ember.lightning.fabric.accelerators.cuda import find_usable_cuda_devices
from ember.lightning.pytorch.accelerators.accelerator import Accelerator
from ember.lightning.pytorch.accelerators.cpu import CPUAccelerator
from ember.lightning.pytorch.accelerators.cuda import CUDAAccelerator
from ember.lightning.pytorch.accelerators.mps import MPSAccelerator
from ember.lightning.pytorch.accelerators.xla import XLAAccelerator
from ember.plugins._shared.devices import count_devices_with

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "XLAAccelerator", "cpu", "cuda",
           "find_usable_cuda_devices", "mps"]


def _cuda_by_these_names() -> int:
    from ember.lightning.pytorch.accelerators import cuda as pytorch_cuda

    return int(pytorch_cuda.num_cuda_devices())  # which asks cuda.num_cuda_devices: a patch of either is heard


def _mps_by_these_names() -> int:
    return len(mps._get_all_available_mps_gpus())


def route_device_counts() -> None:
    """From now on in this process, device selection (``accelerator="auto"``, ``devices="auto"``, the checks of
    ``accelerator="cuda"``/``"mps"``) counts devices through the functions above, looked up when it counts (done
    when Lightning's ``Trainer`` is taken, see :func:`ember.lightning._names.lightning_trainer`)."""
    count_devices_with("cuda", _cuda_by_these_names)
    count_devices_with("mps", _mps_by_these_names)
