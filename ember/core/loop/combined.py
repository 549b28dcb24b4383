"""Several loaders iterated together: the training data of a fit given as a collection of loaders (a list, tuple
or dict, nested), and the combined modes of Lightning's ``CombinedLoader``.

The modes: ``"max_size_cycle"`` (a fit's collection): a batch of every loader together until the longest ends,
the shorter ones starting again; ``"min_size"``: together until the shortest ends; ``"max_size"``: until the
longest ends, exhausted loaders giving None. Each step's batch has the collection's shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils._pytree as pytree


def is_leaf(obj: Any) -> bool:
    """A loader of a collection: anything but a dict, list or tuple, or one of those holding only numbers and
    strings (``[0, 1, 2]`` is an iterable of three batches, not three loaders)."""
    if isinstance(obj, dict):
        children: Iterable[Any] = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    else:
        return True
    return all(isinstance(child, (int, float, str)) for child in children)


def flatten(collection: Any) -> tuple[list[Any], pytree.TreeSpec]:
    """The loaders of ``collection`` in its order, and its shape."""
    return pytree.tree_flatten(collection, is_leaf=is_leaf)


def sized_len(iterable: Any) -> int | None:
    """``len(iterable)``, or None when it has no length."""
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return None


def combined_length(mode: str, loaders: list[Any]) -> int | None:
    """The number of steps of ``loaders`` in ``mode`` (``"sequential"``: all batches one after another)."""
    lengths = [sized_len(it) for it in loaders]
    sizes = [n for n in lengths if n is not None]
    if len(sizes) != len(lengths):
        return None
    if not sizes:
        return 0
    return min(sizes) if mode == "min_size" else sum(sizes) if mode == "sequential" else max(sizes)


class Together:
    """The batches of several loaders together, as one iterable; ``iterables`` is the collection of loaders
    (what ``trainer.train_dataloader`` gives)."""

    def __init__(self, mode: str, loaders: list[Any], spec: pytree.TreeSpec) -> None:
        self.mode, self.loaders, self.spec = mode, loaders, spec

    @property
    def iterables(self) -> Any:
        return pytree.tree_unflatten(self.loaders, self.spec)

    def __len__(self) -> int:
        length = combined_length(self.mode, self.loaders)
        if length is None:
            raise TypeError("loaders iterated together, one of them without a length, have no length")
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
            yield pytree.tree_unflatten(values, self.spec)
