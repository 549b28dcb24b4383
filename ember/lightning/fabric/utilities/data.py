"""``lightning.fabric.utilities.data``: what a data loader is (iterable, sized), and how many workers one could use."""

from __future__ import annotations

from torch.utils.data import IterableDataset

from ember.core.loop import data as _loop_data
from ember.lightning.pytorch.utilities.combined_loader import sized_len

__all__ = ["has_iterable_dataset", "has_len", "sized_len", "suggested_max_num_workers"]


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether ``dataloader`` reads an ``IterableDataset``."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def has_len(dataloader: object) -> bool:
    """Whether ``len(dataloader)`` is defined (a loader of zero batches raises: nothing could be trained on it)."""
    length = sized_len(dataloader)
    if length == 0:
        raise ValueError(f"{type(dataloader).__name__} has no batches (len() is 0).")
    return length is not None



def _num_cpus_available() -> int:
    """The CPUs this process may run on (ember's count). A script that takes Lightning's ``Trainer`` has the
    few-workers check count them through this name (:func:`route_cpu_count`), so that patching it is heard."""
    return _loop_data.available_cpus()


def suggested_max_num_workers(local_world_size: int) -> int:
    """A ``DataLoader(num_workers=...)`` for each of ``local_world_size`` processes on this machine: the CPU cores
    this process may use, shared out, less one for the main process, at least 1."""
    if local_world_size < 1:
        raise ValueError(f"suggested_max_num_workers(local_world_size={local_world_size}): expected >= 1.")
    return max(1, _num_cpus_available() // local_world_size - 1)


def _cpus_by_this_name() -> int:
    return _num_cpus_available()  # the module's attribute when called: a patched function is the one used


def route_cpu_count() -> None:
    """From now on in this process, the few-workers check counts CPUs through :func:`_num_cpus_available` (done
    when Lightning's ``Trainer`` is taken, see :func:`ember.lightning._names.lightning_trainer`)."""
    _loop_data.count_cpus_with(_cpus_by_this_name)
