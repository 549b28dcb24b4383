"""Lightning's loop objects as views of ember's loop state: ``trainer.fit_loop`` (with its ``epoch_loop`` and the
fit's ``val_loop``), ``trainer.validate_loop``, ``trainer.test_loop`` and ``trainer.predict_loop``.

Ember's loop is an event bus, not a tree of loop objects; these views give code written for Lightning the names
it reads (``fit_loop.epoch_progress.current.completed``, ``fit_loop.epoch_loop.batch_progress.total.ready``,
``fit_loop.max_epochs``, ``fit_loop.done``, ...). Every value is worked out when it is read, from the counters the
loop keeps (:class:`~ember.core.loop.state.Progress`, :class:`~ember.core.loop.state.EpochMarks`,
:class:`~ember.core.loop.state.EvalCounts`): the training loop marks an epoch's start and end and nothing per batch,
the evaluation loop notes each batch's index.

Lightning marks four points of each epoch, batch and optimizer step: ``ready``, ``started``, ``processed``,
``completed``. The epoch's four are exact (``processed`` counts the epoch from before ``on_train_epoch_end``,
``completed`` after it). Inside one training batch ember marks only its beginning and its end: ``started`` and
``processed`` read like ``ready`` there (in Lightning they follow ``on_train_batch_start`` and ``training_step``).

Two limits can be assigned, as Lightning users do: ``fit_loop.max_epochs`` and ``epoch_loop.max_steps`` (they are the
Trainer's ``max_epochs``/``max_steps`` from then on, for the running fit's next epoch and for later fits). The
counts are read-only, as ``trainer.current_epoch`` and ``trainer.global_step`` are: only the loop writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import attrs

from ember.core.errors import ConfigurationError
from ember.core.loop.data import LIMIT_ARG, num_batches, reported_counts, stage_loaders
from ember.core.loop.state import PROCESSED, READY, STARTED

if TYPE_CHECKING:
    from ember.core.loop.parts import LoopsLike

_FIELDS = ("ready", "started", "processed", "completed")


def _count(index: int, doc: str) -> Any:
    def get(tracker: ReadyCompletedTracker) -> int:
        return tracker.read()[index]

    def set_(tracker: ReadyCompletedTracker, value: int) -> None:
        raise AttributeError(f"{_FIELDS[index]!r} of a loop's progress is read from ember's loop and cannot be set: "
                             "only the loop writes its counters (as trainer.current_epoch and trainer.global_step). "
                             "To change how long a fit runs, set trainer.fit_loop.max_epochs or "
                             "trainer.fit_loop.epoch_loop.max_steps.")

    return property(get, set_, doc=doc)


class ReadyCompletedTracker:
    """Lightning's counts of a loop point that is only begun and completed (``ready``, ``completed``: an optimizer
    step), read from ember's counters when asked."""

    __slots__ = ("read",)
    _shown: tuple[str, ...] = ("ready", "completed")

    def __init__(self, read: Callable[[], tuple[int, int, int, int]]) -> None:
        self.read = read

    ready = _count(0, "Begun (an epoch: about to start; a batch: fetched).")
    completed = _count(3, "Completed (after the last hook of the epoch, batch or step).")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.read() == other.read()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        values = self.read()
        return f"{type(self).__name__}(" + ", ".join(f"{k}={values[_FIELDS.index(k)]}" for k in self._shown) + ")"


class Tracker(ReadyCompletedTracker):
    """Lightning's four counts of an epoch or a batch: ``ready``, ``started``, ``processed``, ``completed``."""

    __slots__ = ()
    _shown = _FIELDS

    started = _count(1, "Started (an epoch: after on_train_epoch_start).")
    processed = _count(2, "Processed (an epoch: its batches done, from before on_train_epoch_end).")


@attrs.frozen
class ProgressView:
    """Lightning's progress record: ``total`` (across the loop's runs) and ``current`` (the running one)."""

    total: ReadyCompletedTracker
    current: ReadyCompletedTracker
    #: (training batches) whether the running batch is the last of its epoch.
    is_last_batch_of: Callable[[], bool] | None = attrs.field(default=None, repr=False)

    @property
    def is_last_batch(self) -> bool:
        return bool(self.is_last_batch_of()) if self.is_last_batch_of is not None else False


class EvaluationLoopView:
    """``trainer.validate_loop``, ``test_loop``, ``predict_loop`` and ``trainer.fit_loop.epoch_loop.val_loop``:
    the batches the loop ran (``batch_progress``: ``current`` the running or last run, ``total`` all runs, for the
    fit's validation those of the running training epoch)."""

    def __init__(self, loops: LoopsLike, name: str, stage: str) -> None:
        self._loops, self._stage, self._counts = loops, stage, loops.evaluation.counts[name]
        # bound methods, not closures: a Trainer stays picklable
        self.batch_progress = ProgressView(total=Tracker(self._total), current=Tracker(self._current))

    def _current(self, base: int = 0) -> tuple[int, int, int, int]:
        begun, done = self._counts.current
        return base + begun, base + begun, base + begun, base + done

    def _total(self) -> tuple[int, int, int, int]:
        return self._current(self._counts.base)

    @property
    def _max_batches(self) -> list[float]:
        """The batches the loop runs of each of its loaders."""
        t = self._loops.t
        if self._stage == "fit":
            return list(self._loops.training.val_nums)
        return list({"validate": t.num_val_batches, "test": t.num_test_batches,
                     "predict": t.num_predict_batches}[self._stage])

    def setup_data(self) -> None:
        """Read the loop's loaders now, where ember would read them later in the running fit (the fit's validation
        loaders); ``validate``/``test``/``predict`` read theirs as they start. Outside a run, the loaders attached
        by hand (Lightning's ``trainer._data_connector``), else the DataModule's or the module's, as the run would
        read them (without a distributed sampler: no strategy is set up then); none where the limit is 0."""
        loops = self._loops
        if self._stage != "fit" and loops.t.state.status != "running" and _has_data(loops):
            _read_outside_run(loops, self._stage)
        elif self._stage == "fit" and loops.t.state.fn == "fit" and loops.fit_loaders:
            loops.training.load_val_data_if_due()
        elif loops.t.state.fn != self._stage or loops.t.state.status != "running":
            name = "fit_loop.epoch_loop.val_loop" if self._stage == "fit" else f"{self._stage}_loop"
            raise ConfigurationError(f"{name}.setup_data() reads the loaders of a running trainer.{self._stage}(): "
                                     "ember reads them when the run starts, so call it from a hook of that run, or "
                                     "read trainer.num_*_batches after it (outside a run, it reads the loaders "
                                     "attached with Lightning's trainer._data_connector).")


_NUM_BATCHES = {"validate": "num_val_batches", "test": "num_test_batches", "predict": "num_predict_batches"}


def _has_data(loops: LoopsLike) -> bool:
    """Outside a run: a module, a DataModule or loaders are attached, to read loaders from."""
    t = loops.t
    return t.module is not None or t.datamodule is not None or any(v is not None for v in loops.attached.values())


def _read_outside_run(loops: LoopsLike, stage: str) -> None:
    t = loops.t
    loaders = [] if getattr(t, LIMIT_ARG[stage]) == 0 else stage_loaders(t, stage, loops.attached.get(stage))
    loops.eval_loaders[stage] = loaders
    nums = [num_batches(t.config, stage, dl) for dl in loaders]
    setattr(t, _NUM_BATCHES[stage], reported_counts(t.config, stage, loaders, nums))


class EpochLoopView:
    """``trainer.fit_loop.epoch_loop``: the training batches of the running epoch and the optimizer steps."""

    def __init__(self, loops: LoopsLike) -> None:
        self._loops = loops
        self.batch_progress = ProgressView(total=Tracker(self._batches_total), current=Tracker(self._batches),
                                           is_last_batch_of=self._last_batch)
        steps = ProgressView(total=ReadyCompletedTracker(self._steps_total), current=ReadyCompletedTracker(self._steps))
        self.automatic_optimization = SimpleNamespace(optim_progress=SimpleNamespace(optimizer=SimpleNamespace(step=steps)))
        self.manual_optimization = SimpleNamespace(optim_step_progress=steps)
        self.val_loop = EvaluationLoopView(loops, "fit", "fit")

    def _batches(self, total: bool = False) -> tuple[int, int, int, int]:
        p, marks = self._loops.progress, self._loops.training.marks
        if not marks.began:  # (a resumed fit, before its first epoch: only the total is known)
            n = p.batches_seen if total else 0
            return n, n, n, n
        begun = p.batch_idx + 1
        done = marks.first_batch + p.batches_seen - marks.seen
        if total:  # with the batches of earlier epochs that began and never ran (-1 from on_train_batch_start)
            begun, done = p.batches_seen + marks.unfinished + begun - done, p.batches_seen
        return begun, begun, begun, done

    def _batches_total(self) -> tuple[int, int, int, int]:
        return self._batches(total=True)

    def _last_batch(self) -> bool:
        p, marks = self._loops.progress, self._loops.training.marks
        return p.batch_idx + 1 >= self._loops.t.num_training_batches or marks.cut

    def _steps_total(self) -> tuple[int, int, int, int]:
        n = self._loops.progress.global_step
        return n, n, n, n

    def _steps(self) -> tuple[int, int, int, int]:
        marks = self._loops.training.marks
        n = self._loops.progress.global_step - marks.step if marks.began else 0
        return n, n, n, n

    @property
    def global_step(self) -> int:
        return self._loops.progress.global_step

    def _get_monitor_value(self, key: str) -> Any:
        """What a monitor named ``key`` reads now (``trainer.callback_metrics[key]``, None when not logged)."""
        return self._loops.metrics.callback_metrics.get(key)

    def monitor_value(self, key: str) -> Any:
        """What a ReduceLROnPlateau scheduler monitoring ``key`` steps with: ``_get_monitor_value(key)``, Lightning's
        name, read here so that code written for Lightning which replaces it on this object is heard."""
        return self._get_monitor_value(key)

    @property
    def batch_idx(self) -> int:
        """The index of the running (or last) batch in its epoch; -1 before the epoch's first."""
        return int(self.batch_progress.current.ready) - 1

    @property
    def total_batch_idx(self) -> int:
        """The running (or last) batch's index counted over all epochs."""
        return int(self.batch_progress.total.ready) - 1

    @property
    def min_steps(self) -> int | None:
        return self._loops.t.config.min_steps

    @property
    def max_steps(self) -> int:
        return self._loops.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        _set_limit(self._loops, "max_steps", value)

    def accumulating(self) -> bool:
        """The running batch's gradients wait for more batches (no optimizer step after it)."""
        t = self._loops.t
        ready = int(self.batch_progress.current.ready)
        return ready % t.config.accumulate_grad_batches != 0 and ready != t.num_training_batches \
            and not self.batch_progress.is_last_batch

    _should_accumulate = accumulating  # Lightning's name


def _set_limit(loops: LoopsLike, name: str, value: int) -> None:
    """Set the Trainer's ``name`` (``max_epochs``, ``max_steps``), checked as the Trainer argument is, for the running
    fit's next epoch and for later fits."""
    t = loops.t
    t.config = attrs.evolve(t.config, **{name: value})
    setattr(loops, name, value)


class FitLoopView:
    """``trainer.fit_loop``: the fit's epochs (``epoch_progress``), limits and ``done``; ``epoch_loop`` has the
    batches and optimizer steps."""

    def __init__(self, loops: LoopsLike) -> None:
        self._loops = loops
        self.epoch_progress = ProgressView(total=Tracker(self._epochs), current=Tracker(self._epochs))
        self.epoch_loop = EpochLoopView(loops)

    def _epochs(self) -> tuple[int, int, int, int]:
        e, phase = self._loops.progress.current_epoch, self._loops.training.marks.phase
        return e + (phase >= READY), e + (phase >= STARTED), e + (phase >= PROCESSED), e

    @property
    def max_epochs(self) -> int:
        return self._loops.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int) -> None:
        _set_limit(self._loops, "max_epochs", value)

    @property
    def min_epochs(self) -> int | None:
        return self._loops.t.config.min_epochs

    @property
    def max_steps(self) -> int:
        return self.epoch_loop.max_steps

    @property
    def min_steps(self) -> int | None:
        return self.epoch_loop.min_steps

    @property
    def max_batches(self) -> float:
        """Training batches per epoch (``trainer.num_training_batches``; ``inf`` until the fit reads its loader)."""
        return self._loops.t.num_training_batches

    @property
    def batch_idx(self) -> int:
        return self.epoch_loop.batch_idx

    @property
    def total_batch_idx(self) -> int:
        return self.epoch_loop.total_batch_idx

    @property
    def _can_stop_early(self) -> bool:
        """``should_stop`` may end the fit: ``min_epochs`` epochs and ``min_steps`` optimizer steps are done."""
        cfg = self._loops.t.config
        return (not cfg.min_epochs or self._epochs()[2] >= cfg.min_epochs) and \
            (not cfg.min_steps or self._loops.progress.global_step >= cfg.min_steps)

    @property
    def done(self) -> bool:
        """The fit has nothing left to run: no training batches, ``max_steps`` or ``max_epochs`` reached, or
        ``should_stop`` set where it may take effect."""
        loops = self._loops
        if loops.t.num_training_batches == 0:
            return True
        if loops.max_steps != -1 and loops.progress.global_step >= loops.max_steps:
            return True
        if loops.max_epochs != -1 and self._epochs()[2] >= loops.max_epochs:
            return True
        return bool(loops.progress.should_stop) and self._can_stop_early

    def _should_accumulate(self) -> bool:
        return self.epoch_loop.accumulating()

    def setup_data(self) -> None:
        """Read the fit's training loader now (ember reads it when training starts). Outside a run, the loader
        attached by hand (Lightning's ``trainer._data_connector``), else the DataModule's or the module's; none
        where ``limit_train_batches`` is 0."""
        loops = self._loops
        if loops.t.state.status != "running" and _has_data(loops):
            loops.fit_loaders = {"train": loops.attached.get("train"), "validate": loops.attached.get("validate")}
            if getattr(loops.t, LIMIT_ARG["train"]) == 0:
                loops.training.given_train_loader = loops.training.train_loader = None
                loops.t.num_training_batches = 0
            else:
                loops.load_train_data()
        elif loops.t.state.fn != "fit" or not loops.fit_loaders or loops.t.state.status != "running":
            raise ConfigurationError("fit_loop.setup_data() reads the training loader of a running trainer.fit(): "
                                     "ember reads it as training starts, so call it from a hook of the fit, or read "
                                     "trainer.num_training_batches after it (outside a run, it reads the loader "
                                     "attached with Lightning's trainer._data_connector).")
        elif loops.training.train_loader is None:
            loops.load_train_data()


class LoopViews:
    """The four loop views of one Trainer, made once (so that what is set on them stays)."""

    def __init__(self, loops: LoopsLike) -> None:
        self.fit = FitLoopView(loops)
        self.validate = EvaluationLoopView(loops, "validate", "validate")
        self.test = EvaluationLoopView(loops, "test", "test")
        self.predict = EvaluationLoopView(loops, "predict", "predict")
