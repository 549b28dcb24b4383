"""Precisions: which dtype the math runs in. One module per precision; helpers shared here."""

from __future__ import annotations

from typing import Any

import torch


def cast_floats(data: Any, dtype: torch.dtype) -> Any:
    """Cast the floating-point tensors in nested lists, tuples and dicts to ``dtype``."""
    if isinstance(data, torch.Tensor):
        return data.to(dtype) if data.is_floating_point() else data
    if isinstance(data, dict):
        return type(data)((k, cast_floats(v, dtype)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        items = [cast_floats(v, dtype) for v in data]
        if hasattr(data, "_fields"):
            return type(data)(*items)
        return items if isinstance(data, list) else type(data)(items)
    return data


class default_dtype:
    """Context manager: ``torch.get_default_dtype()`` is ``dtype`` inside, so tensors the model creates in
    its step match the converted parameters."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __enter__(self) -> None:
        self.previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc: Any) -> None:
        torch.set_default_dtype(self.previous)


def autocast_device_type(device: torch.device) -> str:
    return device.type if device.type in ("cuda", "cpu", "mps", "xpu") else "cpu"
