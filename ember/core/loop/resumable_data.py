"""Making the training loader resumable mid-epoch, without replaying consumed batches.

How it works, for a ``torch.utils.data.DataLoader`` over a map-style dataset (the common case):

* The fit iterates a shallow copy of the user's loader whose index sampler (the ``batch_sampler``, or the
  ``sampler`` when ``batch_size=None``) is wrapped in :class:`ResumableIndexSampler`. The user's object is
  left untouched.
* When an epoch's iteration begins, the wrapper records the random state the order is about to be drawn
  from (torch, NumPy, Python and the sampler's own generator; torch's and the sampler's only for torch's
  own samplers, which draw from nothing else), then yields exactly what the wrapped sampler yields. It draws nothing itself, so a run that never resumes sees the same batches, in the same order,
  with the same random numbers as a plain ``for batch in loader`` loop.
* Resuming after ``k`` batches, it puts that recorded state back, lets the wrapped sampler draw the same
  order, skips ``k`` lists of indices (no sample is loaded), and then restores the random state of the
  moment of the checkpoint, so the first new batch is loaded with the random numbers it would have seen.

Works with any sampler whose order depends on the random state when its iteration starts and on
``set_epoch``: ``RandomSampler`` (with or without a generator), ``SequentialSampler``,
``DistributedSampler``, ``SubsetRandomSampler``, ``WeightedRandomSampler``, most custom ones. Two other kinds
of loader are handled: one with ``state_dict``/``load_state_dict`` (e.g. torchdata's
``StatefulDataLoader``) saves and loads its own position; anything else (an ``IterableDataset``, a plain
iterable) is fast-forwarded by drawing and discarding the consumed batches, with a warning.
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from ember.core.loop import rng

log = logging.getLogger("ember")

#: How a loader is made resumable (saved in the checkpoint).
SAMPLER, STATEFUL, REPLAY = "sampler", "stateful", "replay"


class ResumableIndexSampler(Sampler):
    """Yields what ``inner`` yields; remembers the random state each epoch's order was drawn from."""

    def __init__(self, inner: Any, generators: tuple[torch.Generator, ...]) -> None:
        self.inner = inner
        self.generators = generators
        #: Whether the order is drawn from torch's generators alone (NumPy's and Python's states, about two
        #: thirds of a capture's cost, every epoch, are then not needed to draw it again).
        self.torch_only = _draws_from_torch_only(inner)
        #: The random state captured when the current epoch's iteration began.
        self.order_state: dict[str, Any] | None = None
        self._resume: tuple[dict[str, Any], int, dict[str, Any]] | None = None
        # Code that inspects a loader's batch sampler finds what it expects.
        for name in ("sampler", "batch_size", "drop_last"):
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def __len__(self) -> int:
        return len(self.inner)

    def set_epoch(self, epoch: int) -> None:
        """Passed on (a ``DistributedSampler`` used with ``batch_size=None`` needs it)."""
        set_epoch = getattr(self.inner, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def resume(self, order_state: dict[str, Any], skip: int, after: dict[str, Any]) -> None:
        """Make the next iteration draw the order from ``order_state``, skip ``skip`` items, then restore
        ``after`` before yielding the first one."""
        self._resume = (order_state, skip, after)

    def __iter__(self) -> Iterator[Any]:
        # A generator: this body runs when the loader asks for the first indices, which is when the wrapped
        # sampler would draw its order. (A loader may call iter() more than once before that; only the
        # iteration that runs consumes a pending resume.)
        pending, self._resume = self._resume, None
        if pending is None:
            self.order_state = rng.capture(self.generators, torch_only=self.torch_only)
            yield from self.inner
            return
        order_state, skip, after = pending
        rng.restore(order_state, self.generators)
        self.order_state = order_state
        it = iter(self.inner)
        first = next(itertools.islice(it, skip, None), _END)
        rng.restore(after, self.generators)
        if first is _END:
            return
        yield first
        yield from it


_END = object()

#: torch's samplers whose order comes from torch's global generator or their own ``generator`` only.
_TORCH_SAMPLERS = (RandomSampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler)


def _draws_from_torch_only(sampler: Any) -> bool:
    """True for torch's own samplers (exactly those classes: a subclass may draw from NumPy), alone or in
    torch's ``BatchSampler``."""
    if type(sampler) is BatchSampler:
        sampler = sampler.sampler
    return type(sampler) in _TORCH_SAMPLERS


def _generators(loader: Any, sampler: Any) -> tuple[torch.Generator, ...]:
    found: list[torch.Generator] = []
    for owner in (sampler, getattr(sampler, "sampler", None), loader):
        g = getattr(owner, "generator", None)
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return tuple(found)


class TrainData:
    """The training loader of one fit, in its resumable form (``loader`` is what the loop iterates)."""

    def __init__(self, loader: Any) -> None:
        self.original = loader
        self.loader = loader
        self.index_sampler: ResumableIndexSampler | None = None
        self.generators: tuple[torch.Generator, ...] = ()
        if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset) \
                and not _stateful(loader):
            self.kind = SAMPLER
            auto_collation = loader.batch_sampler is not None
            inner = loader.batch_sampler if auto_collation else loader.sampler
            self.generators = _generators(loader, inner)
            self.index_sampler = ResumableIndexSampler(inner, self.generators)
            self.loader = copy.copy(loader)
            # DataLoader forbids setting its samplers after construction; the copy is ours to change.
            object.__setattr__(self.loader, "batch_sampler" if auto_collation else "sampler", self.index_sampler)
            object.__setattr__(self.loader, "_iterator", None)
        elif _stateful(loader):
            self.kind = STATEFUL
        else:
            self.kind = REPLAY

    def state(self) -> dict[str, Any]:
        """The data's part of a checkpoint: what restores this epoch's order (the batch position is in
        the loop progress)."""
        state: dict[str, Any] = {"kind": self.kind, "length": _length(self.loader)}
        if self.index_sampler is not None and self.index_sampler.order_state is not None:
            state["order_state"] = self.index_sampler.order_state
        if self.kind == STATEFUL:
            state["loader_state"] = self.loader.state_dict()
        return state

    def resumed_iterator(self, saved: dict[str, Any], skip: int) -> Iterator[Any]:
        """An iterator over this epoch's batches from batch ``skip`` on, with the random state as it is now
        when the first of them is loaded."""
        after = rng.capture(self.generators)
        if saved.get("length") is not None and saved["length"] != _length(self.loader):
            log.warning("resuming with a training loader of %s batches; the checkpoint was written with %s. "
                        "The data order after the resume will not match the interrupted run.",
                        _length(self.loader), saved["length"])
        if self.kind == SAMPLER and saved.get("kind") == SAMPLER and "order_state" in saved:
            assert self.index_sampler is not None
            self.index_sampler.resume(saved["order_state"], skip, after)
            return iter(self.loader)
        if self.kind == STATEFUL and "loader_state" in saved:
            self.loader.load_state_dict(saved["loader_state"])
            it = iter(self.loader)
            rng.restore(after, self.generators)
            return it
        if skip:
            log.warning("the training data (%s) cannot skip batches without loading them: drawing and discarding "
                        "%d batches to reach the checkpoint's position. Use a torch DataLoader over a map-style "
                        "dataset, or a loader with state_dict()/load_state_dict(), for an exact and fast resume.",
                        type(self.loader).__name__, skip)
        it = iter(self.loader)
        for _ in itertools.islice(it, skip):
            pass
        rng.restore(after, self.generators)
        return it


def _stateful(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None
