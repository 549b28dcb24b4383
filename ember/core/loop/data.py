"""Where each stage's batches come from, how many of them a stage runs, and how one reaches the device."""

from __future__ import annotations

import math
import multiprocessing
import os
import re
import signal
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ember.core.errors import ConfigurationError, PossibleUserWarning, warn_user
from ember.core.hooks.positional import defines
from ember.core.loop import seed
from ember.core.loop.combined import Together, flatten, is_leaf

if TYPE_CHECKING:
    from ember.core.hooks.config import TrainerConfig
    from ember.hookspecs import TrainerLike

#: The method of the DataModule (or the module) that gives a stage's data.
LOADER_METHODS = {"train": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader",
                  "predict": "predict_dataloader"}
LIMIT_ARG = {"train": "limit_train_batches", "validate": "limit_val_batches", "test": "limit_test_batches",
             "predict": "limit_predict_batches"}


def stage_loaders(trainer: TrainerLike, stage: str, given: Any) -> list[Any]:
    """The loaders of ``stage``: those given, else the DataModule's or the module's, each passed through the
    ``process_dataloader`` hook (a distributed strategy adds its sampler there). A fit's training data given as a
    collection of loaders (a list, tuple or dict, nested) is one iterable whose batch is the collection of their
    batches, the shorter loaders starting again until the longest ends (as in Lightning)."""
    if given is None:
        for source in (trainer.datamodule, trainer.module):
            if source is not None and defines(source, LOADER_METHODS[stage]):
                method = getattr(source, LOADER_METHODS[stage])
                context = getattr(getattr(trainer, "loop", None), "log_context", None)
                # no self.log in a *_dataloader method (Lightning)
                given = method() if context is None else context.call_refusing(LOADER_METHODS[stage], method)
                break
    if given is None:
        return []
    split = getattr(given, "stage_loaders", None)  # a loader collection that says how it runs (CombinedLoader)
    if callable(split):
        items = list(split())
    elif stage == "train" and isinstance(given, (list, tuple, dict)) and not is_leaf(given) \
            and all(_is_loader(leaf) for leaf in flatten(given)[0]):
        leaves, spec = flatten(given)
        return [Together("max_size_cycle", [_prepared(trainer, stage, leaf) for leaf in leaves], spec)]
    elif isinstance(given, (list, tuple)) and given and all(_is_loader(g) for g in given):
        items = list(given)
    else:
        items = [given]
    return [_prepared(trainer, stage, loader) for loader in items]


def _prepared(trainer: TrainerLike, stage: str, loader: Any) -> Any:
    if trainer.is_global_zero:
        _check_workers(trainer, loader, LOADER_METHODS[stage])
        if stage != "train" and length(loader) == 0 and getattr(trainer.config, LIMIT_ARG[stage]) != 0:
            warn_user(f"The '{LOADER_METHODS[stage]}' has no batches (len() is 0): its dataset is empty, or smaller "
                      f"than one batch with drop_last=True, so no {stage} step runs on it (and nothing is logged "
                      "from it). Check the data, or pass no loader for this stage if that was the intention.")
    if trainer.config.overfit_batches and stage in ("train", "validate"):
        loader = sequential(loader, stage)
    process = trainer.hook.process_dataloader  # None outside a run (loaders read through the loop views)
    processed = process(trainer=trainer, dataloader=loader, stage=stage) if process is not None else None
    return seed.seed_workers(loader if processed is None else processed, trainer.global_rank, trainer)


def has_source(trainer: TrainerLike, stage: str, given: Any) -> bool:
    """Whether ``stage`` has data, without asking for it: loaders were given, or the DataModule or the module
    defines the stage's ``*_dataloader()`` method."""
    return given is not None or any(defines(source, LOADER_METHODS[stage])
                                    for source in (trainer.datamodule, trainer.module) if source is not None)


def available_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: Where the few-workers check reads the CPU count, when not :func:`available_cpus` (see :func:`count_cpus_with`).
_cpu_counter: Callable[[], int] | None = None


def count_cpus_with(counter: Callable[[], int] | None) -> Callable[[], int] | None:
    """From now on in this process, the few-workers check asks ``counter()`` for the CPUs it may suggest workers
    for (None: :func:`available_cpus`). The Lightning layer routes it through Lightning's function of that name, so
    that code which fakes the CPU count there (a test patching it) is heard. Returns the counter set before."""
    global _cpu_counter
    before, _cpu_counter = _cpu_counter, counter
    return before


def _check_workers(trainer: TrainerLike, loader: Any, name: str) -> None:
    """What is likely wrong with how a ``DataLoader`` starts its workers, said once per loader as a stage sets up
    (as Lightning does): workers started again every epoch under the ``spawn`` start method, too few workers while
    CPUs are free (a likely bottleneck, rarely intended past a first try), pinned memory with persistent workers
    that are rebuilt with the loader."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return
    context = loader.multiprocessing_context
    # not get_start_method() alone: that would fix the process's start method, which a script may still set
    start_method = context.get_start_method() if context is not None else \
        multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if loader.num_workers > 0 and start_method == "spawn" and not loader.persistent_workers:
        warn_user(f"The '{name}' starts DataLoader(num_workers={loader.num_workers}) workers with the 'spawn' start "
                  "method and does not keep them: every epoch starts them again, each importing your script and "
                  "the dataset anew, which can cost more than the epoch's batches. Consider setting "
                  "`persistent_workers=True` in the DataLoader to start them once.")
    elif loader.num_workers < 2:
        _few_workers(trainer, loader, name)
    if loader.persistent_workers and loader.pin_memory and trainer.config.reload_dataloaders_every_n_epochs > 0:
        warn_user(f"The '{name}' is a DataLoader(pin_memory=True, persistent_workers=True) and "
                  f"Trainer(reload_dataloaders_every_n_epochs={trainer.config.reload_dataloaders_every_n_epochs}) "
                  "asks for a new one every few epochs: PyTorch can hang or crash when such a loader is discarded "
                  "while its workers live (https://github.com/pytorch/pytorch/issues/91252). Set pin_memory=False "
                  "in this loader, or stop reloading it.", PossibleUserWarning)


def _few_workers(trainer: TrainerLike, loader: torch.utils.data.DataLoader, name: str) -> None:
    per_node = max(1, trainer.world_size // max(1, trainer.config.num_nodes))
    cpus = available_cpus() if _cpu_counter is None else _cpu_counter()
    suggested = max(1, cpus // per_node - 1)  # one CPU left for the training process
    if suggested > 1:
        where = "the training process" if loader.num_workers == 0 else "a single worker process"
        warn_user(f"The '{name}' does not have many workers (DataLoader(num_workers={loader.num_workers})): its "
                  f"batches are loaded one at a time in {where} and the model may wait for them, while "
                  f"{suggested} CPUs are free to load them in parallel. Pass DataLoader(num_workers={suggested}) "
                  "(or as many as the dataset's __getitem__ needs) to keep the model busy.", PossibleUserWarning)


def sequential(loader: Any, stage: str) -> Any:
    """``overfit_batches``: the same batches every epoch, so a shuffling ``DataLoader`` is rebuilt without
    shuffling (with a warning, as in Lightning)."""
    sampler = getattr(loader, "sampler", None)
    if not isinstance(loader, torch.utils.data.DataLoader) or isinstance(sampler, torch.utils.data.SequentialSampler) \
            or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return loader
    if type(loader) is not torch.utils.data.DataLoader or loader.batch_size is None:
        raise ConfigurationError(f"Trainer(overfit_batches=...) needs the {stage} data in a fixed order, but its "
                                 f"loader ({type(loader).__name__} with {type(sampler).__name__}) cannot be rebuilt "
                                 "without shuffling; pass a DataLoader with shuffle=False.")
    name = "val" if stage == "validate" else stage
    warnings.warn(f"You requested to overfit but enabled {name} dataloader shuffling: Trainer(overfit_batches=...) "
                  f"turns off the shuffling of the {stage} DataLoader, so that every epoch sees the same batches.",
                  UserWarning, stacklevel=4)
    return torch.utils.data.DataLoader(**loader_arguments(loader), batch_size=loader.batch_size, shuffle=False,
                                       drop_last=loader.drop_last)


def loader_arguments(loader: torch.utils.data.DataLoader) -> dict[str, Any]:
    """The arguments that rebuild ``loader`` apart from how it batches and samples (``in_order`` only where this
    torch has it: 2.6 and later)."""
    kwargs: dict[str, Any] = {
        "dataset": loader.dataset, "num_workers": loader.num_workers, "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory, "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "persistent_workers": loader.persistent_workers, "pin_memory_device": loader.pin_memory_device,
    }
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    return kwargs


def num_batches(config: TrainerConfig, stage: str, loader: Any) -> float:
    """How many batches of ``loader`` the stage runs: its length under ``limit_*_batches`` and ``fast_dev_run``."""
    n = length(loader)
    if n != math.inf and isinstance(getattr(loader, "dataset", None), torch.utils.data.IterableDataset):
        warnings.warn("Your `IterableDataset` has `__len__` defined: the run trusts it for the number of "
                      f"{stage} batches, but with several DataLoader workers each one iterates the whole dataset "
                      "unless it is split per worker (torch.utils.data.get_worker_info()), and the length no longer "
                      "matches the batches that arrive.", UserWarning, stacklevel=2)
    if config.fast_dev_batches:
        return min(n, config.fast_dev_batches)
    limit = getattr(config, LIMIT_ARG[stage])
    if limit is None:
        return n
    if isinstance(limit, int):
        return min(n, limit)
    if limit == 1.0:
        return n
    if n == math.inf:
        raise ConfigurationError(f"Trainer({LIMIT_ARG[stage]}={limit}) is a fraction, but the {stage} data (an "
                                 f"`IterableDataset`, or a loader without a length) has no length: "
                                 f"`Trainer({LIMIT_ARG[stage]})` must be `1.0` or an int number of batches.")
    batches = int(n * limit)
    if batches == 0 and limit > 0:
        raise ConfigurationError(f"Trainer({LIMIT_ARG[stage]}={limit}) gives 0 of the {int(n)} {stage} "
                                 "batches; use a larger fraction or an int.")
    return batches


def reported_counts(config: TrainerConfig, stage: str, loaders: list[Any], nums: list[float]) -> list[float]:
    """``trainer.num_*_batches``: the batches of each loader, where ``nums`` are those the run takes of each of
    ``loaders``; loaders iterated together (a combined ``CombinedLoader``) are counted each, as in Lightning."""
    out: list[float] = []
    for loader, n in zip(loaders, nums, strict=True):
        if isinstance(loader, Together):
            out += [num_batches(config, stage, leaf) for leaf in loader.loaders]
        else:
            out.append(n)
    return out


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """``set_epoch(epoch)`` on the sampler of ``loader`` and on the sampler of its batch sampler (once where they
    are the same), on each of loaders iterated together: at the start of each training epoch and of each
    evaluation run (a ``DistributedSampler`` shuffles by it; some users shuffle validation by the epoch)."""
    if isinstance(loader, Together):
        for leaf in loader.loaders:
            set_sampler_epoch(leaf, epoch)
        return
    sampler = getattr(loader, "sampler", None)
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    for s in (sampler, inner if inner is not sampler else None):
        set_epoch = getattr(s, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


def length(loader: Any) -> float:
    """``len(loader)``, or infinity for a loader without a length."""
    try:
        return len(loader)
    except (TypeError, NotImplementedError):  # no length (some iterables raise the latter)
        return math.inf


def with_last(iterable: Any, start: int = 0) -> Any:
    """Enumerate with a one-batch look-ahead, so the last batch of an unsized loader is known as such:
    yields ``(index, (batch, is_last))``."""
    it = iter(iterable)
    try:
        current = next(it)
    except StopIteration:
        return
    idx = start
    for nxt in it:
        yield idx, (current, False)
        current = nxt
        idx += 1
    yield idx, (current, True)


def _is_loader(obj: Any) -> bool:
    if isinstance(obj, torch.utils.data.DataLoader):
        return True
    return hasattr(obj, "__iter__") and not isinstance(obj, (torch.Tensor, tuple, list, dict, str, bytes))


#: The start of torch's error when a DataLoader worker process dies (killed, out of memory, crashed).
_DEAD_WORKER = re.compile(r"^DataLoader worker \(pid\(?s?\)? ([\d, ]+)\)")
#: The loader property of the Trainer that serves each stage.
_STAGE_LOADER = {"train": "train_dataloader", "sanity_check": "val_dataloaders", "validate": "val_dataloaders",
                 "test": "test_dataloaders", "predict": "predict_dataloaders"}


def note_dead_worker(trainer: Any, exc: BaseException) -> None:
    """When a run fails while a DataLoader worker process is dead (killed, out of memory, crashed): add to ``exc``
    a note naming the worker, the loader (the stage's, with its index when it has several), the stage, the epoch
    and batch, and the usual cause. The error itself is torch's ("DataLoader worker (pid N) is killed by signal") or,
    when the worker died while handing over a batch, the broken connection's.

    The iterators that own a dead worker are shut down first: torch raises its error from its SIGCHLD handler
    whenever any child exits while the dead pid is registered, so the exit of the loader's other workers
    (whenever the iterator is freed) would raise it again in whatever code runs then."""
    if not _may_be_a_worker_death(exc):
        return
    dead = _shut_down_iterators_with_dead_workers()
    match = _DEAD_WORKER.match(str(exc)) if not dead and isinstance(exc, RuntimeError) else None
    if match is not None:  # its iterator is gone already (and its workers with it)
        dead = [f"pid {pid.strip()}" for pid in match.group(1).split(",")]
    stage = getattr(trainer.state, "stage", None)
    if not dead or stage not in _STAGE_LOADER:
        return
    name = _STAGE_LOADER[stage]
    loaders = getattr(trainer, name, None)
    ctx = trainer.loop.log_context
    if isinstance(loaders, list):
        index = ctx.dataloader_idx if stage != "train" else 0
        name, loader = f"{name}[{index}]", loaders[index] if index < len(loaders) else None
    else:
        loader = loaders
    workers = getattr(loader, "num_workers", "?")
    where = f", epoch {trainer.current_epoch}, batch {trainer.loop.progress.batch_idx}" if stage == "train" else ""
    note = (f"ember: a worker process ({', '.join(dead)}) of the {stage} stage's loader trainer.{name} "
            f"({type(loader).__name__} with num_workers={workers}) died during {trainer.state.fn}{where}. The run "
            "stopped; the usual cause is the out-of-memory killer (see `dmesg`): use fewer workers or less memory "
            "per worker, or num_workers=0 to load in this process.")
    if hasattr(exc, "add_note"):  # Python 3.11+; before, the error stays as torch raised it
        exc.add_note(note)


def _may_be_a_worker_death(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the errors torch gives when a loader's worker process dies: its "DataLoader worker
    (pid N) ..." RuntimeError, or the broken connection (an OSError, EOFError) of a worker that died while handing
    over a batch. Any other error (an out-of-memory error in a batch-size search, a user's bug) skips the search
    through every live object, which costs about a second in a large process."""
    if isinstance(exc, (OSError, EOFError)):
        return True
    return type(exc) is RuntimeError and "DataLoader worker" in str(exc)


def _shut_down_iterators_with_dead_workers() -> list[str]:
    """Find every multi-process DataLoader iterator, not shut down, with a worker process that has ended; unregister
    its worker pids (so that torch's SIGCHLD handler stops raising for them) and shut its workers down. Returns
    the dead workers as ``"pid N, killed by SIGKILL"``."""
    import gc

    from torch.utils.data import dataloader
    from torch.utils.data._utils import signal_handling

    dead: list[str] = []
    for it in gc.get_objects():
        if not issubclass(type(it), dataloader._MultiProcessingDataLoaderIter):  # (type(): no proxy lookups)
            continue
        try:
            if it._shutdown:
                continue
            ended = [w for w in it._workers if w.exitcode is not None]
            if not ended:
                continue
            dead += [f"pid {w.pid}, {_how(w.exitcode)}" for w in ended]
            if it._worker_pids_set:
                it._worker_pids_set = False
                signal_handling._remove_worker_pids(id(it))
            it._shutdown_workers()
        except Exception:  # noqa: S112 - a torch without these internals: its error stays as it is
            continue
    return dead


def _how(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"
