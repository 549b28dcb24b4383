"""The states of every random number generator a run draws from, as plain data.

A checkpoint must load with ``torch.load(weights_only=True)``, which builds tensors and plain containers
only, so the states are converted: NumPy's key array and Python's ``random`` state (625 numbers) become int64
tensors, which a checkpoint stores as one block each rather than as hundreds of pickled ints. Capturing reads the generators and consumes nothing; restoring puts them back exactly.
"""

from __future__ import annotations

import array
import ctypes
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
        state["numpy"] = _numpy.capture(np)
    if generators:
        state["generators"] = [g.get_state() for g in generators]
    return state


class _NumpyState:
    """NumPy's global state as :func:`capture` stores it, read again only when it may have moved.

    ``np.random.get_state()`` copies the generator's 624 key words one at a time (about half a million instructions,
    most of a checkpoint's random states), though most runs never draw from NumPy's global generator. The words and
    the position are also readable as raw bytes through the bit generator's ``ctypes.state_address`` (2,500 bytes,
    a copy): when they have not changed since the last capture and that capture had no cached Gaussian, nothing
    else can have changed, so the last capture is the state (its tensor is shared, read only). A cached Gaussian
    (``has_gauss``) is used up without touching the words, so with one every capture reads the state. The bytes
    are trusted only after the first capture found them equal to what ``get_state`` returned (the memory layout is
    NumPy's); :func:`restore` forgets the last capture, as does any other generator than the one read."""

    def __init__(self) -> None:
        self.generator: Any = None
        self.raw: bytes | None = None
        self.state: dict[str, Any] | None = None
        self.layout_checked: bool | None = None  # None: not yet; False: the bytes are not used

    def capture(self, np: Any) -> dict[str, Any]:
        generator, raw = self._raw(np)
        if raw is not None and raw == self.raw and generator is self.generator and self.state is not None and \
                not self.state["has_gauss"]:
            return self.state
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                 "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
        if raw is not None and self.layout_checked is None:
            self.layout_checked = raw == keys.astype(np.uint32).tobytes() + int(pos).to_bytes(4, sys.byteorder)
        self.generator, self.raw, self.state = generator, raw if self.layout_checked else None, state
        return state

    def _raw(self, np: Any) -> tuple[Any, bytes | None]:
        if self.layout_checked is False:
            return None, None
        try:  # (NumPy 1.25 and later name the global generator's bit generator; before, it is read each time)
            generator = np.random.get_bit_generator()
            if type(generator).__name__ != "MT19937":
                return generator, None
            return generator, ctypes.string_at(generator.ctypes.state_address, 624 * 4 + 4)
        except (AttributeError, TypeError, ValueError):  # another NumPy: read the state each time
            self.layout_checked = False
            return None, None

    def holds(self, np: Any, state: dict[str, Any]) -> bool:
        """True when NumPy's generator is in ``state`` now (the last capture, not moved since): restoring it would
        change nothing (``set_state`` copies the words one at a time too)."""
        if state is not self.state or self.raw is None or state["has_gauss"]:
            return False
        generator, raw = self._raw(np)
        return generator is self.generator and raw == self.raw

    def forget(self) -> None:
        self.raw = self.state = None


_numpy = _NumpyState()


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

        if not _numpy.holds(np, npstate):  # (it does after a sanity check that drew nothing from NumPy)
            _numpy.forget()
            np.random.set_state((npstate["kind"], npstate["keys"].numpy().astype(np.uint32), npstate["pos"],
                                 npstate["has_gauss"], npstate["cached_gaussian"]))
    for generator, saved in zip(generators, state.get("generators", ()), strict=False):
        generator.set_state(saved)
