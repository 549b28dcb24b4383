"""``lightning.fabric.accelerators.cuda``: how many CUDA devices there are (``num_cuda_devices``,
``is_cuda_available``), which of them accept work (``find_usable_cuda_devices``), and ``CUDAAccelerator``
(:class:`ember.lightning.pytorch.accelerators.CUDAAccelerator`).

A Trainer taken through Lightning's names counts CUDA devices through ``num_cuda_devices`` of this module (and of
``lightning.pytorch.accelerators.cuda``), read when it counts: a test that patches it to fake GPUs builds a
``Trainer(accelerator="cuda", devices=2)`` on a machine without any (a fit there stops with an error saying so).
Nothing here initialises CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ember.plugins._shared.devices import torch_device_count

if TYPE_CHECKING:
    from ember.lightning.pytorch.accelerators.cuda import CUDAAccelerator

__all__ = ["CUDAAccelerator", "find_usable_cuda_devices", "is_cuda_available", "num_cuda_devices"]


def num_cuda_devices() -> int:
    """The CUDA devices this process sees (``torch.cuda.device_count()``; CUDA is not initialised)."""
    return torch_device_count("cuda")


def is_cuda_available() -> bool:
    """Whether this process sees a CUDA device (through :func:`num_cuda_devices`, so a patched count is heard)."""
    return num_cuda_devices() > 0


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The indices of ``num_devices`` CUDA devices this process can allocate memory on (all of them for -1), for
    ``Trainer(devices=...)`` on a machine whose GPUs may be taken by other jobs (exclusive compute mode)."""
    if num_devices == 0:
        return []
    visible = num_cuda_devices()
    if visible == 0:
        raise ValueError(f"find_usable_cuda_devices({num_devices}): no CUDA device is visible here.")
    if num_devices > visible:
        raise ValueError(f"find_usable_cuda_devices({num_devices}): only {visible} CUDA device(s) are visible.")
    usable: list[int] = []
    for index in range(visible):
        try:
            torch.tensor(0, device=torch.device("cuda", index))
        except RuntimeError:
            continue
        usable.append(index)
        if len(usable) == num_devices:
            return usable
    if num_devices != -1:
        raise RuntimeError(f"find_usable_cuda_devices({num_devices}): only {len(usable)} of the {visible} visible CUDA "
                           f"devices accept memory ({usable}); the others are busy or in exclusive mode.")
    return usable


def __getattr__(name: str) -> Any:
    if name == "CUDAAccelerator":  # imported when asked for: that module counts through this one
        from ember.lightning.pytorch.accelerators.cuda import CUDAAccelerator

        return CUDAAccelerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
