"""The states of every random number generator a run draws from, as plain data.

A checkpoint must load with ``torch.load(weights_only=True)``, which builds tensors and plain containers
only, so the states are converted: NumPy's key array and Python's ``random`` state (625 numbers) become int64
tensors, which a checkpoint stores as one block each rather than as hundreds of pickled ints. Capturing reads the generators and consumes nothing; restoring puts them back exactly.
"""

from __future__ import annotations

import array
import random
import sys
from typing import Any

import torch

#: Python's ``random`` internal state at the last capture, and the tensor made of it (read only: checkpoints share it)
_python_last: tuple[Any, Any] = (None, None)


def capture(generators: tuple[torch.Generator, ...] = (), torch_only: bool = False) -> dict[str, Any]:
    """The states of torch (CPU and every initialised CUDA device), NumPy (if imported), Python's ``random``
    and of ``generators`` (for example a sampler's own ``torch.Generator``). ``torch_only``: leave NumPy's and
    Python's out (:func:`restore` then leaves them as they are)."""
    global _python_last
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if not torch_only:
        version, internal, gauss = random.getstate()
        if internal != _python_last[0]:  # most runs never draw from it: the last capture's tensor serves again
            # through an int64 array: a few times faster than torch.tensor on 625 Python ints (done every epoch)
            _python_last = internal, torch.frombuffer(array.array("q", internal), dtype=torch.int64)
        state["python"] = {"version": version, "state": _python_last[1], "gauss": gauss}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = None if torch_only else sys.modules.get("numpy")  # not imported: nobody drew from it
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    if generators:
        state["generators"] = [g.get_state() for g in generators]
    return state


def restore(state: dict[str, Any], generators: tuple[torch.Generator, ...] = ()) -> None:
    """Put back what :func:`capture` returned; ``generators`` are matched by position."""
    torch.set_rng_state(state["torch"])
    py = state.get("python")
    if py is not None:
        internal = py["state"]
        internal = internal.tolist() if isinstance(internal, torch.Tensor) else internal  # a list in older files
        random.setstate((py["version"], tuple(internal), py["gauss"]))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
    npstate = state.get("numpy")
    if npstate is not None:
        import numpy as np

        np.random.set_state((npstate["kind"], npstate["keys"].numpy().astype(np.uint32), npstate["pos"],
                             npstate["has_gauss"], npstate["cached_gaussian"]))
    for generator, saved in zip(generators, state.get("generators", ()), strict=False):
        generator.set_state(saved)
