"""The states of every random number generator a run draws from, as plain data.

A checkpoint must load with ``torch.load(weights_only=True)``, which builds tensors and plain containers
only, so the states are converted: NumPy's key array and Python's ``random`` state (625 numbers) become int64
tensors, which a checkpoint stores as one block each rather than as hundreds of pickled ints. Capturing reads the
generators and consumes nothing; restoring puts them back exactly.
"""

from __future__ import annotations

import _random
import array
import ctypes
import random
import sys
from typing import Any

import torch


def capture(generators: tuple[torch.Generator, ...] = (), torch_only: bool = False) -> dict[str, Any]:
    """The states of torch (CPU and every initialised CUDA device), NumPy (if imported), Python's ``random``
    and of ``generators`` (for example a sampler's own ``torch.Generator``). ``torch_only``: leave NumPy's and
    Python's out (:func:`restore` then leaves them as they are)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if not torch_only:
        state["python"] = _python.capture(random)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = None if torch_only else sys.modules.get("numpy")  # not imported: nobody drew from it
    if np is not None:
        state["numpy"] = _numpy.capture(np)
    if generators:
        state["generators"] = [g.get_state() for g in generators]
    return state


_WORDS = 624  # a Mersenne Twister's key words


class _RawState:
    """A global generator's state as :func:`capture` stores it, read again only when it may have moved.

    Reading a Mersenne Twister's state through its library copies its 624 key words one at a time (NumPy's
    ``get_state`` about half a million instructions, Python's ``getstate`` a hundred thousand), though most runs
    never draw from these generators. The words and the position are also readable as raw bytes (2,500 bytes, a
    copy): when they and the rest of the state (:meth:`_rest`) have not changed since the last capture, that
    capture is the state. The bytes are trusted only after the first capture found them equal to what the library
    returned (the memory layout is the library's); :func:`restore` forgets the last capture, as does any other
    generator than the one read. Subclasses say where the bytes are and how the library reads the state."""

    def __init__(self) -> None:
        self.generator: Any = None
        self.raw: bytes | None = None
        self.state: dict[str, Any] | None = None
        self.layout_checked: bool | None = None  # None: not yet; False: the bytes are not used

    def capture(self, module: Any) -> dict[str, Any]:
        generator, raw = self._read_raw(module)
        if raw is not None and raw == self.raw and generator is self.generator and self.state is not None and \
                self._rest(generator, self.state):
            return self.state
        state, expected = self._read(module)
        if raw is not None and self.layout_checked is None:
            self.layout_checked = raw == expected
        self.generator, self.raw, self.state = generator, raw if self.layout_checked else None, state
        return state

    def holds(self, module: Any, state: dict[str, Any]) -> bool:
        """True when the generator is in ``state`` now (the last capture, not moved since): restoring it would
        change nothing (restoring copies the words one at a time too)."""
        if self.raw is None or state is not self.state:
            return False
        generator, raw = self._read_raw(module)
        return generator is self.generator and raw == self.raw and self._rest(generator, state)

    def forget(self) -> None:
        self.raw = self.state = None

    def _read_raw(self, module: Any) -> tuple[Any, bytes | None]:
        if self.layout_checked is False:
            return None, None
        try:
            return self._raw(module)
        except (AttributeError, TypeError, ValueError):  # another version: read the state each time
            self.layout_checked = False
            return None, None

    def _raw(self, module: Any) -> tuple[Any, bytes | None]:
        raise NotImplementedError

    def _read(self, module: Any) -> tuple[dict[str, Any], bytes]:
        """The state as captured, and the raw bytes it stands for."""
        raise NotImplementedError

    def _rest(self, generator: Any, state: dict[str, Any]) -> bool:
        """The part of ``state`` outside the raw bytes is the generator's now."""
        raise NotImplementedError


class _NumpyState(_RawState):
    """NumPy's global state, its raw bytes read through the bit generator's ``ctypes.state_address`` (NumPy 1.25
    and later name the global generator's bit generator; before, the state is read each time). A cached Gaussian
    (``has_gauss``) is used up without touching the words and is not among the bytes, so with one every capture
    reads the state. Captures share the state (read only)."""

    def _raw(self, np: Any) -> tuple[Any, bytes | None]:
        generator = np.random.get_bit_generator()
        if type(generator).__name__ != "MT19937":
            return generator, None
        return generator, ctypes.string_at(generator.ctypes.state_address, 4 * _WORDS + 4)

    def _read(self, np: Any) -> tuple[dict[str, Any], bytes]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                 "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
        return state, keys.astype(np.uint32).tobytes() + int(pos).to_bytes(4, sys.byteorder)

    def _rest(self, generator: Any, state: dict[str, Any]) -> bool:
        return not state["has_gauss"]


_numpy = _NumpyState()


class _PythonState(_RawState):
    """Python's ``random`` state (``{"version", "state", "gauss"}``, the 625 numbers of ``getstate`` as an int64
    tensor), its raw bytes read from the generator object behind ``random.getstate`` (CPython's ``_random.Random``
    keeps its position and words right after the object header). The cached Gaussian (``gauss_next``) is an
    attribute, compared on its own. Captures share the state (read only)."""

    def _raw(self, module: Any) -> tuple[Any, bytes | None]:
        generator = module.getstate.__self__
        if not _CPYTHON or not isinstance(generator, _random.Random) or \
                _random.Random.__basicsize__ < _HEADER + 4 + 4 * _WORDS:  # (elsewhere id() is no address)
            return generator, None
        return generator, ctypes.string_at(id(generator) + _HEADER, 4 + 4 * _WORDS)

    def _read(self, module: Any) -> tuple[dict[str, Any], bytes]:
        version, internal, gauss = module.getstate()
        # through an int64 array: a few times faster than torch.tensor on 625 Python ints
        state = {"version": version, "state": torch.frombuffer(array.array("q", internal), dtype=torch.int64),
                 "gauss": gauss}
        try:
            expected = int(internal[-1]).to_bytes(4, sys.byteorder, signed=True) + \
                array.array("I", internal[:-1]).tobytes()
        except (OverflowError, TypeError, IndexError):  # not the layout read: the bytes are not used
            expected = b""
        return state, expected

    def _rest(self, generator: Any, state: dict[str, Any]) -> bool:
        gauss = getattr(generator, "gauss_next", _NO_GAUSS)
        return gauss is state["gauss"] or gauss == state["gauss"]


_HEADER = object.__basicsize__  # what precedes an object's own fields
_CPYTHON = sys.implementation.name == "cpython"
_NO_GAUSS = object()
_python = _PythonState()


def restore(state: dict[str, Any], generators: tuple[torch.Generator, ...] = ()) -> None:
    """Put back what :func:`capture` returned; ``generators`` are matched by position."""
    torch.set_rng_state(state["torch"])
    py = state.get("python")
    if py is not None and not _python.holds(random, py):  # (it does after a sanity check that drew nothing)
        _python.forget()
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
