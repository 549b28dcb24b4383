"""``lightning.pytorch.utilities.combined_loader``: several loaders iterated together.

``CombinedLoader(iterables, mode)`` takes a loader collection (a dict, list or tuple of loaders, nested) and a
mode:

* ``"max_size_cycle"`` (the default): batches of every loader together until the longest ends, the shorter ones
  starting again;
* ``"min_size"``: together until the shortest ends; ``"max_size"``: until the longest ends, exhausted ones giving
  None;
* ``"sequential"``: one loader after the other.

Iterated directly it yields ``(batch, batch_idx, dataloader_idx)`` as Lightning's does (``dataloader_idx`` is 0
except in ``"sequential"`` mode). Given to ember's Trainer, the combined modes are one loader whose batch is the
collection of the loaders' batches, and ``"sequential"`` gives each loader as its own (``dataloader_idx`` is its
position), through the ``stage_loaders()`` method ember's loop asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils._pytree as pytree

_MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def sized_len(iterable: Any) -> int | None:
    """``len(iterable)``, or None when it has no length."""
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return None


def tree_unflatten(values: list[Any], spec: pytree.TreeSpec) -> Any:
    """The collection ``spec`` describes, holding ``values`` (``torch.utils._pytree``'s unflatten)."""
    return pytree.tree_unflatten(values, spec)


def _is_leaf(obj: Any) -> bool:
    """A loader of the collection: anything but a dict, list or tuple, or one of those holding only numbers and
    strings (``[0, 1, 2]`` is an iterable of three batches, not three loaders)."""
    if isinstance(obj, dict):
        children: Iterable[Any] = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    else:
        return True
    return all(isinstance(child, (int, float, str)) for child in children)


def _combined_length(mode: str, loaders: list[Any]) -> int | None:
    lengths = [sized_len(it) for it in loaders]
    sizes = [n for n in lengths if n is not None]
    if len(sizes) != len(lengths):
        return None
    if not sizes:
        return 0
    return min(sizes) if mode == "min_size" else sum(sizes) if mode == "sequential" else max(sizes)


class _Together:
    """The batches of several loaders together, as one iterable (a combined mode's view for the Trainer)."""

    def __init__(self, mode: str, loaders: list[Any], spec: pytree.TreeSpec) -> None:
        self.mode, self.loaders, self.spec = mode, loaders, spec

    def __len__(self) -> int:
        length = _combined_length(self.mode, self.loaders)
        if length is None:
            raise TypeError("a CombinedLoader over loaders without a length has no length")
        return length

    def __iter__(self) -> Iterator[Any]:
        loaders = self.loaders
        iterators: list[Iterator[Any]] = [iter(it) for it in loaders]
        exhausted = [False] * len(iterators)
        while iterators:
            values = []
            for i in range(len(iterators)):
                try:
                    values.append(next(iterators[i]))
                    continue
                except StopIteration:
                    exhausted[i] = True
                if self.mode == "min_size" or all(exhausted):
                    return
                if self.mode == "max_size":  # an exhausted loader gives None until the longest ends
                    iterators[i] = iter(())
                    values.append(None)
                else:  # max_size_cycle: start this one again
                    iterators[i] = iter(loaders[i])
                    values.append(next(iterators[i]))
            yield tree_unflatten(values, self.spec)


class CombinedLoader(Iterable):
    """Iterate a collection of loaders together or one after the other (see the module's doc)."""

    def __init__(self, iterables: Any, mode: str = "max_size_cycle") -> None:
        if mode not in _MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}) is not supported: expected one of {list(_MODES)}.")
        self._iterables = iterables
        self._mode = mode
        self._flattened, self._spec = pytree.tree_flatten(iterables, is_leaf=_is_leaf)

    @property
    def iterables(self) -> Any:
        return self._iterables

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in the collection's order."""
        return self._flattened

    @flattened.setter
    def flattened(self, loaders: list[Any]) -> None:
        if len(loaders) != len(self._flattened):
            raise ValueError(f"CombinedLoader.flattened: expected {len(self._flattened)} loaders, got {len(loaders)}.")
        self._flattened = list(loaders)
        self._iterables = tree_unflatten(self._flattened, self._spec)

    @property
    def sampler(self) -> Any:
        """The loaders' samplers, in the collection's shape."""
        return tree_unflatten([getattr(it, "sampler", None) for it in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        return tree_unflatten([getattr(it, "batch_sampler", None) for it in self._flattened], self._spec)

    def __len__(self) -> int:
        length = _combined_length(self._mode, self._flattened)
        if length is None:
            raise TypeError("a CombinedLoader over loaders without a length has no length")
        return length

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        if self._mode == "sequential":
            for dataloader_idx, loader in enumerate(self._flattened):
                for batch_idx, batch in enumerate(loader):
                    yield batch, batch_idx, dataloader_idx
            return
        for batch_idx, batch in enumerate(_Together(self._mode, self._flattened, self._spec)):
            yield batch, batch_idx, 0

    def stage_loaders(self) -> list[Any]:
        """What ember's Trainer runs: each loader for ``"sequential"``, else one iterable of the combined
        batches."""
        return list(self._flattened) if self._mode == "sequential" else [_Together(self._mode, self._flattened, self._spec)]

    def reset(self) -> None:
        """Nothing to reset: each iteration starts the loaders afresh."""


__all__ = ["CombinedLoader", "sized_len", "tree_unflatten"]
