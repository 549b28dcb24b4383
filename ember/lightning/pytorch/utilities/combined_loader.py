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

from ember.core.loop.combined import Together, combined_length, flatten, sized_len

_MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def tree_unflatten(values: list[Any], spec: pytree.TreeSpec) -> Any:
    """The collection ``spec`` describes, holding ``values`` (``torch.utils._pytree``'s unflatten)."""
    return pytree.tree_unflatten(values, spec)


class CombinedLoader(Iterable):
    """Iterate a collection of loaders together or one after the other (see the module's doc)."""

    def __init__(self, iterables: Any, mode: str = "max_size_cycle") -> None:
        if mode not in _MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}) is not supported: expected one of {list(_MODES)}.")
        self._iterables = iterables
        self._mode = mode
        self._flattened, self._spec = flatten(iterables)

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
        length = combined_length(self._mode, self._flattened)
        if length is None:
            raise TypeError("a CombinedLoader over loaders without a length has no length")
        return length

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        if self._mode == "sequential":
            for dataloader_idx, loader in enumerate(self._flattened):
                for batch_idx, batch in enumerate(loader):
                    yield batch, batch_idx, dataloader_idx
            return
        for batch_idx, batch in enumerate(Together(self._mode, self._flattened, self._spec)):
            yield batch, batch_idx, 0

    def stage_loaders(self) -> list[Any]:
        """What ember's Trainer runs: each loader for ``"sequential"``, else one iterable of the combined
        batches."""
        return list(self._flattened) if self._mode == "sequential" else [Together(self._mode, self._flattened, self._spec)]

    def reset(self) -> None:
        """Nothing to reset: each iteration starts the loaders afresh."""


__all__ = ["CombinedLoader", "sized_len", "tree_unflatten"]
