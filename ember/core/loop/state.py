"""The run's state, in small records the loop owns.

- :class:`TrainerState`: which entry point runs (``fn``), which stage (``stage``) and how it went (``status``);
  ``trainer.state``, with Lightning's ``.fn``/``.stage``/``.status``/``.finished``.
- :class:`Progress`: the fit loop's counters (epoch, optimizer steps, batch, batches seen, ``should_stop``);
  read through ``trainer.current_epoch``, ``trainer.global_step``, ``trainer.batch_idx``, ``trainer.should_stop``.
  A checkpoint saves it as one :class:`FitProgress` and restores it as one.
- :class:`EpochMarks` and :class:`EvalCounts`: where the running training epoch and each evaluation run stand,
  marked a few times per epoch and once per evaluation batch; ``trainer.fit_loop`` and the other loop views
  (:mod:`ember.core.loop.loop_views`) derive Lightning's progress counters from them when asked.
- :class:`LogContext`: what ``self.log`` needs to know about the moment it is called in (the stage's
  results, the default ``on_step``/``on_epoch``, the dataloader index and count, the current batch).

The loop writes these records; plugins and the module read them through the Trainer's properties.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

import attrs

from ember.core.errors import CheckpointError

log = logging.getLogger("ember")

if TYPE_CHECKING:
    from ember.core.loop.results import Results

_FNS = (None, "fit", "validate", "test", "predict")
_STAGES = (None, "train", "sanity_check", "validate", "test", "predict")
_STATUSES = ("initializing", "running", "finished", "interrupted", "failed", "launched")
_PHASES = ("epoch_start", "batch", "epoch_end")


class StateName(str):
    """A state value (``"fit"``, ``"train"``): a string that also answers ``.value``, as Lightning's enums of
    ``trainer.state`` do (``trainer.state.fn.value``)."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)


def _name(value: Any) -> Any:
    if isinstance(value, Enum):  # Lightning's TrainerFn/RunningStage members, set by code written for Lightning
        value = value.value
    return StateName(value) if isinstance(value, str) and not isinstance(value, StateName) else value


def _one_of(allowed: tuple) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"trainer.state.{attribute.name}={value!r} is not one of {allowed}.")

    return check


@attrs.frozen
class Launched:
    """A ``launch`` answer: the job ran in processes that this one started and waited for, and the strategy has
    brought their results back (weights, metrics, checkpoint paths); the entry point returns ``result`` here
    without running the loop."""

    result: Any = None


@attrs.define(slots=True)
class TrainerState:
    """What the trainer is doing: ``fn`` (the entry point), ``stage`` (the loop running now) and ``status``."""

    fn: str | None = attrs.field(default=None, validator=_one_of(_FNS), converter=_name,
                                 on_setattr=[attrs.setters.convert, attrs.setters.validate])
    stage: str | None = attrs.field(default=None, validator=_one_of(_STAGES), converter=_name,
                                    on_setattr=[attrs.setters.convert, attrs.setters.validate])
    status: str = attrs.field(default="initializing", validator=_one_of(_STATUSES), converter=_name,
                              on_setattr=[attrs.setters.convert, attrs.setters.validate])
    #: The ``setup`` hook ran in this run, so ``teardown`` runs at its end.
    setup_done: bool = False
    #: The validation running now is the sanity check before training.
    sanity_checking: bool = False

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def interrupted(self) -> bool:
        return self.status == "interrupted"

    # read-only mapping access, for code written against the earlier ``trainer.state["fn"]``
    def __getitem__(self, name: str) -> Any:
        if name not in _KEYS:
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name) if name in _KEYS else default


_KEYS = frozenset(f.name for f in attrs.fields(TrainerState))


def _phase(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in _PHASES:
        raise CheckpointError(f"loops['fit']['phase']={value!r} is not one of {_PHASES}: the checkpoint is "
                              "damaged or was written by an incompatible ember.")


@attrs.frozen
class FitProgress:
    """The fit loop's counters as a checkpoint holds them (``loops["fit"]``), and the safe point it was
    written at."""

    #: ``trainer.current_epoch``.
    epoch: int
    #: ``trainer.global_step`` (optimizer steps).
    global_step: int
    #: Training batches processed in all epochs (for ``val_check_interval`` counted across epochs).
    batches_seen: int
    #: ``trainer.should_stop``.
    should_stop: bool
    #: ``"epoch_start"``: before epoch ``epoch`` drew its first batch (also before and after training);
    #: ``"batch"``: after batch ``batch_idx`` of epoch ``epoch`` and its validation, if one was due;
    #: ``"epoch_end"``: after the end (``on_train_epoch_end``) of epoch ``epoch``, which ``max_steps`` ended after
    #: batch ``batch_idx``, before its last.
    phase: str = attrs.field(validator=_phase)
    #: The last batch processed in this epoch (phases ``"batch"`` and ``"epoch_end"``), else -1.
    batch_idx: int = -1

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FitProgress:
        names = {f.name for f in attrs.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise CheckpointError(f"loops['fit'] is incomplete ({exc}): the checkpoint is damaged.") from exc


@attrs.define(slots=True)
class Progress:
    """The fit loop's counters. Only the loop writes them (and a plugin ``should_stop``)."""

    #: Epochs completed (the index of the epoch running now).
    current_epoch: int = 0
    #: Optimizer steps taken.
    global_step: int = 0
    #: The index of the training batch running now, within its epoch.
    batch_idx: int = 0
    #: Training batches processed in all epochs.
    batches_seen: int = 0
    #: Set by a plugin or the module to end the fit at the next point where it may stop.
    should_stop: bool = False

    def snapshot(self, batch_idx: int | None = None) -> FitProgress:
        """The counters as a checkpoint written now holds them: after batch ``batch_idx`` of the current epoch,
        or (None) before the epoch's first batch."""
        return FitProgress(epoch=self.current_epoch, global_step=self.global_step, batches_seen=self.batches_seen,
                           should_stop=bool(self.should_stop), phase="epoch_start" if batch_idx is None else "batch",
                           batch_idx=-1 if batch_idx is None else batch_idx)

    def restore(self, saved: FitProgress) -> None:
        """Continue from the counters of a checkpoint."""
        self.current_epoch, self.global_step = saved.epoch, saved.global_step
        self.batches_seen, self.should_stop = saved.batches_seen, saved.should_stop


#: ``EpochMarks.phase``: no epoch running; the epoch is about to start (``on_train_epoch_start`` runs); its batches
#: run; its batches are done (``on_train_epoch_end`` runs, the epoch is not counted yet).
IDLE, READY, STARTED, PROCESSED = 0, 1, 2, 3


@attrs.define(slots=True)
class EpochMarks:
    """Where the running training epoch stands, written by the training loop at its start and end only."""

    #: :data:`IDLE`, :data:`READY`, :data:`STARTED` or :data:`PROCESSED`.
    phase: int = IDLE
    #: An epoch has run its batches on this Trainer (before, the batch counters read 0).
    began: bool = False
    #: Where the epoch's batches began: the batch index (past 0 when resuming mid-epoch), ``Progress.batches_seen``
    #: and ``Progress.global_step`` then.
    first_batch: int = 0
    seen: int = 0
    step: int = 0
    #: Batches of earlier epochs that began and did not run (``on_train_batch_start`` returned -1).
    unfinished: int = 0
    #: ``on_train_batch_start`` returned -1 in this epoch: its running batch is its last.
    cut: bool = False


@attrs.define(slots=True)
class EvalCounts:
    """The batches one evaluation loop ran (the fit's validation, ``validate``, ``test`` or ``predict``).

    ``current`` counts the running (or last) run; ``total`` adds the earlier runs, from ``base``. The fit's
    validation starts ``total`` again at each training epoch, as Lightning's does.
    """

    #: Batches completed in this run by the loaders it has finished.
    done: int = 0
    #: The index of the batch running now in its loader, -1 between batches of different loaders.
    batch_idx: int = -1
    #: What ``total`` counts besides this run (negative after the epoch restart, while ``current`` still reads
    #: the previous run).
    base: int = 0

    @property
    def current(self) -> tuple[int, int]:
        """(batches begun, batches completed) in this run."""
        i = self.batch_idx
        return (self.done + i + 1, self.done + i) if i >= 0 else (self.done, self.done)

    def start_run(self) -> None:
        self.base, self.done, self.batch_idx = self.base + self.done, 0, -1

    def restart_total(self) -> None:
        """``total`` starts again from 0; ``current`` keeps reading the last run."""
        self.base = -self.done

    def clear(self) -> None:
        self.done, self.batch_idx, self.base = 0, -1, 0


#: ``LogContext.defaults``: (default on_step, default on_epoch, called from an epoch-level hook).
STEP = (True, False, False)
EPOCH_HOOK = (False, True, True)
EVAL_STEP = (False, True, False)


@attrs.define(slots=True)
class LogContext:
    """Where a ``self.log`` call lands: set by the loop before each step and each epoch-level hook."""

    #: The results of the stage running now (None outside a run: logging is an error there).
    results: Results | None = None
    #: (default on_step, default on_epoch, called from an epoch-level hook): see :data:`STEP`.
    defaults: tuple[bool, bool, bool] = STEP
    #: The index of the dataloader the current batch came from, and how many the stage has.
    dataloader_idx: int = 0
    num_dataloaders: int = 1
    #: The current batch, after the transfer to the device (None between batches).
    batch: Any = None
    #: The hook running now in which ``self.log`` is refused (set only around such hooks), named in the error.
    refused_in: str | None = None

    def enter(self, results: Results | None, num_dataloaders: int, defaults: tuple[bool, bool, bool]) -> None:
        """A stage begins: its results receive what is logged from now on."""
        self.results, self.num_dataloaders, self.dataloader_idx = results, num_dataloaders, 0
        self.defaults = defaults

    def leave(self) -> None:
        """The run ends: nothing is collected until the next stage begins."""
        self.results, self.refused_in, self.batch = None, None, None

    def call_refusing(self, hook: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` with ``self.log`` refused inside it (Lightning's rule for ``hook``), then handed
        back as it was. Used around hooks that run at most a few times per epoch, or per batch only when implemented."""
        saved = self.results, self.refused_in
        self.results, self.refused_in = None, hook
        try:
            return call(*args, **kwargs)
        finally:
            self.results, self.refused_in = saved

    def saved(self) -> tuple[Any, ...]:
        return self.results, self.defaults, self.dataloader_idx, self.num_dataloaders, self.batch

    def restore(self, saved: tuple[Any, ...]) -> None:
        self.results, self.defaults, self.dataloader_idx, self.num_dataloaders, self.batch = saved


def say_min_unmet(config: Any) -> bool:
    """Log that ``should_stop`` waits for ``min_epochs``/``min_steps`` (the loop says it once per fit)."""
    log.info("trainer.should_stop was set, but `min_epochs=%s` or `min_steps=%s` has not been met. Training will "
             "continue until both are reached, then stop.", config.min_epochs, config.min_steps)
    return True
