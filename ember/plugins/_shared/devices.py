"""How many devices of a kind device selection counts: ``accelerator="auto"``, ``devices="auto"`` and the checks of
``Trainer(accelerator=..., devices=...)`` when a Trainer is built.

By default the count is torch's (``torch.cuda.device_count()``, ``torch.backends.mps.is_available()``); neither
initialises CUDA. A layer above may route a count through a function of its own (:func:`count_devices_with`):
the Lightning layer does, so that code which fakes a GPU count by patching Lightning's
``num_cuda_devices`` (as test suites do) is heard when a Trainer is built. A run still needs the devices to be
there: the accelerator checks torch's own count when the run starts (:func:`torch_device_count`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: The device kinds whose count can be routed.
KINDS = ("cuda", "mps")
_routes: dict[str, Callable[[], int] | None] = dict.fromkeys(KINDS)


def torch_device_count(kind: str) -> int:
    """The devices of ``kind`` torch sees in this process (never routed)."""
    if kind == "cuda":
        return torch.cuda.device_count()
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return 1 if mps is not None and mps.is_available() else 0
    raise ValueError(f"device_count({kind!r}): expected one of {', '.join(KINDS)}.")


def device_count(kind: str) -> int:
    """The devices of ``kind`` device selection counts: the routed counter's answer, else torch's."""
    route = _routes.get(kind)
    return int(route()) if route is not None else torch_device_count(kind)


def count_devices_with(kind: str, counter: Callable[[], int] | None) -> Callable[[], int] | None:
    """From now on in this process, device selection asks ``counter()`` for the number of ``kind`` devices (None:
    torch's count). Returns the counter set before, to put back."""
    if kind not in KINDS:
        raise ValueError(f"count_devices_with({kind!r}, ...): expected one of {', '.join(KINDS)}.")
    before, _routes[kind] = _routes[kind], counter
    return before
