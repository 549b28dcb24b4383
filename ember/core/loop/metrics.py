"""``self.log``: where a logged value goes, and when it reaches ``callback_metrics`` and the loggers.

:class:`MetricLog` belongs to the loop. It records each value in the current stage's
:class:`~ember.core.loop.results.Results` (chosen by the loop's :class:`~ember.core.loop.state.LogContext`), publishes
step values at once and epoch values when the loop ends an epoch, and hands both to the ``log_metrics`` hook
at the points the loop chooses.

The step a logger is given: on ember's axis, ``global_step`` (the optimizer steps taken, the one that just ran
included). A Trainer taken through Lightning's names uses Lightning's axis instead (:data:`LIGHTNING_STEPS`): the
batches that stepped before the one being written (optimizer steps under automatic optimization, batches under
manual), so a fit's rows carry that count less one, ``validate()``/``test()`` the count itself, a value logged as
``"step"`` replaces it, and an evaluation's per-step values are written after each of its batches at the batches
its dataloader ran before (counted over the validations of one fit). Both are read from the loop's counters when
a row is written: keeping either costs nothing per batch.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from ember.core.errors import ConfigurationError, warn_user
from ember.core.hooks import options
from ember.core.loop.results import MetricEntry, Results, check_reduce_fx, to_floats, to_tensor
from ember.core.loop.state import EVAL_STEP, STEP, LogContext, Progress

if TYPE_CHECKING:
    from ember.core.loop.state import EvalCounts
    from ember.hookspecs import TrainerLike

#: The identity under which the Lightning layer switches a Trainer's loggers to Lightning's step axis: a Trainer
#: built while :func:`ember.core.hooks.options.substitute` holds a factory for it that returns ``"lightning"``.
LIGHTNING_STEPS = "logging.lightning-steps"


class LogRefused(ConfigurationError, RuntimeError):
    """``self.log`` called where a running Trainer collects no metrics (a ``RuntimeError`` too, as it was)."""


class MetricLog:
    """The metrics of one trainer: ``callback_metrics``, ``logged_metrics`` and the progress bar's."""

    def __init__(self, trainer: TrainerLike, context: LogContext, progress: Progress) -> None:
        self.trainer = trainer
        self.context = context
        self.progress = progress
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}
        self.progress_bar_metrics: dict[str, torch.Tensor] = {}
        self._batch_size: tuple[Any, float] | None = None  # (batch, its inferred size)
        axis = options.substitute_for(LIGHTNING_STEPS)
        #: The loggers are given Lightning's step axis (a Trainer taken through Lightning's names), not ember's.
        self.lightning_steps = axis is not None and axis() == "lightning"
        #: Each evaluation loop's counters, by loop (set by the loop that owns them): where an evaluation stands.
        self.eval_counts: dict[str, EvalCounts] = {}
        # Lightning's axis: the per-step values of the evaluation batch that ran last, not yet written, with
        # (stage, dataloader, batch index); and the batches each dataloader ran in the fit's earlier validations
        self._eval_row: dict[str, torch.Tensor] = {}
        self._eval_row_at: tuple[str, int, int] = ("", 0, -1)
        self._eval_seen: dict[int, float] = {}

    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean", sync_dist: bool = False,
            batch_size: int | None = None, add_dataloader_idx: bool = True,
            metric_attribute: str | None = None) -> None:
        """Record ``value`` under ``name`` in the current stage (``self.log``'s arguments and defaults)."""
        ctx = self.context
        results = ctx.results
        if results is None or self.trainer.config.barebones:
            if self.trainer.config.barebones:  # as in Lightning: a warning, and the value is dropped
                warnings.warn(f"self.log({name!r}) was called, but `Trainer(barebones=True)` is configured: nothing is "
                              "recorded under it (logging costs speed); remove barebones=True to log.", stacklevel=3)
                return
            results = self._stage_set_by_hand(name)
        several = ctx.num_dataloaders > 1 and add_dataloader_idx
        key = f"{name}/dataloader_idx_{ctx.dataloader_idx}" if several else name
        entry = results.entries.get(key)
        if entry is None:
            entry = results.entries[key] = self._new_entry(name, key, on_step, on_epoch, prog_bar, logger,
                                                           reduce_fx, sync_dist, add_dataloader_idx)
        entry.serial = self.progress.batches_seen
        if type(value) is torch.Tensor and value.ndim == 0:  # the usual case, checked without a call
            # a tensor without a graph is kept as it is: detaching it would only make another tensor object
            tensor = value.detach() if value.requires_grad else value
        else:
            tensor = to_tensor(name, value)
            if not isinstance(tensor, torch.Tensor):  # a torchmetrics Metric: it accumulates its own epoch state
                if entry.metric is not tensor and metric_attribute is None:  # a metric object new under this name
                    _check_metric_owner(self.trainer.module, name, tensor)
                entry.add_metric(tensor)
                if entry.on_step and entry.last is not None:
                    self.publish_step(entry, entry.last)
                if ctx.defaults[2] and entry.on_epoch:
                    self.publish_epoch_value(entry, entry.compute())
                return
        entry.last = tensor
        if entry.on_epoch:
            weight = 1.0
            if entry.reduce_fx == "mean":
                weight = float(batch_size) if batch_size is not None else self.batch_size()
            entry.add(tensor, weight)
        if entry.on_step:
            t = self.trainer
            if entry.sync_dist and t.world_size > 1:  # the step value shown and logged is the global one
                tensor = entry.last = t.hook.reduce(trainer=t, tensor=tensor, op=_sync_op(entry))
            self.publish_step(entry, tensor)
        if ctx.defaults[2] and entry.on_epoch:  # logged from an epoch-level hook: final already
            self.publish_epoch_value(entry, entry.compute())

    def _stage_set_by_hand(self, name: str) -> Results:
        """Outside a run, code that sets ``trainer.state.stage`` by hand (a unit test of a step, as Lightning's
        own tests write them) logs into that stage's results with its step defaults, as Lightning lets it;
        anywhere else :meth:`_refuse` says why nothing is collected."""
        t, ctx = self.trainer, self.context
        stage, loop = t.state.stage, getattr(t, "loop", None)
        if t.state.status != "running" and ctx.refused_in is None and loop is not None and stage in _BY_HAND:
            attribute, defaults = _BY_HAND[stage]
            results: Results = getattr(loop, attribute)
            ctx.enter(results, 1, defaults)
            return results
        self._refuse(name)

    def _refuse(self, name: str) -> NoReturn:
        """``self.log`` where nothing is collected: an error that says why and what to do instead."""
        state, hook = self.trainer.state, self.context.refused_in
        if state.stage == "predict":
            raise LogRefused(f"self.log({name!r}) was called in predict, which records no metrics: a result "
                             "collection is not registered yet in trainer.predict() (nor ever is, as in Lightning). "
                             "Return the value from predict_step instead (trainer.predict returns the outputs).")
        if hook is not None:
            raise LogRefused(
                f"You can't `self.log({name!r}, ...)` inside `{hook}`: no metrics are collected in that hook (as in "
                "Lightning). Log it from a step, a batch hook or an epoch hook (on_train_epoch_end, "
                "on_validation_epoch_end, ...), or write to the logger directly (self.logger.experiment).")
        if state.status == "running":
            raise LogRefused(
                f"You can't `self.log({name!r}, ...)` here: it was called while trainer.{state.fn}() runs but "
                "outside its epoch loops (in setup, configure_model, configure_optimizers, configure_callbacks, "
                "prepare_data, on_fit_start, on_sanity_check_start, on_train_end, on_fit_end, teardown, "
                "on_exception or a *_dataloader method, for example), where no metrics are collected. Log it from a "
                "step or a batch or epoch hook, or write to the logger directly (self.logger.experiment).")
        raise RuntimeError(f"self.log({name!r}) was called outside a step or hook of a running trainer.")

    def _new_entry(self, name: str, key: str, on_step: bool | None, on_epoch: bool | None, prog_bar: bool,
                   logger: bool | None, reduce_fx: Any, sync_dist: bool, add_dataloader_idx: bool) -> MetricEntry:
        """The entry of a name first logged in this run of the stage: its options are fixed now."""
        ctx = self.context
        if logger is None:  # not asked for: to the loggers where there are any
            logger = True
        elif logger and not self.trainer.loggers:
            warn_user(f"You called `self.log({name!r}, ..., logger=True)` but have no logger on this Trainer (it "
                      f"was built with logger=False or an empty list), so {name!r} only reaches "
                      "trainer.callback_metrics and trainer.logged_metrics. Pass Trainer(logger=...) (a CSVLogger, "
                      "TensorBoardLogger, ...) to record it, or leave out logger=True.")
        d_step, d_epoch, _ = ctx.defaults
        on_step = d_step if on_step is None else on_step
        on_epoch = d_epoch if on_epoch is None else on_epoch
        if not on_step and not on_epoch:
            raise ConfigurationError(f"self.log({name!r}, on_step=False, on_epoch=False) records nothing, which "
                                     "is not useful; log it per step (on_step=True), per epoch (on_epoch=True) "
                                     "or both.")
        if add_dataloader_idx and "/dataloader_idx_" in name:  # it would clash with the suffix added to names
            raise ConfigurationError(f"You called `self.log` with the key `{name}`: a name must not contain "
                                     "`/dataloader_idx_` (the suffix self.log adds under several dataloaders); rename "
                                     "it, or pass add_dataloader_idx=False to keep it as it is.")
        entry = MetricEntry(key, on_step, on_epoch, prog_bar, logger, check_reduce_fx(name, reduce_fx), sync_dist)
        if ctx.num_dataloaders > 1 and not add_dataloader_idx:
            entry.dataloader_idx = ctx.dataloader_idx
        return entry

    def batch_size(self) -> float:
        """The current batch's size (the weight of a mean), inferred once per batch."""
        batch = self.context.batch
        cached = self._batch_size
        if cached is not None and cached[0] is batch:
            return cached[1]
        found = _infer_batch_size(batch)
        self._batch_size = (batch, found)
        return found

    def publish_step(self, entry: MetricEntry, value: torch.Tensor) -> None:
        key = entry.step_key  # the sanity check's too, read by its hooks, and forgotten when it ends (Lightning)
        if self.context.defaults[0]:  # training; an evaluation's step values go to the loggers and the bar only
            self.callback_metrics[key] = value
            if entry.on_epoch:  # `name` is the step value until the epoch ends, then the epoch value (Lightning)
                self.callback_metrics[entry.name] = value
        elif self.lightning_steps and entry.logger:
            self._hold_eval_step(key, value)
        if entry.logger:
            self.logged_metrics[key] = value
        if entry.prog_bar:
            self.progress_bar_metrics[key] = value

    def _hold_eval_step(self, key: str, value: torch.Tensor) -> None:
        """Lightning's axis: a value an evaluation batch logs per step joins that batch's row, which is written when
        the next batch logs one or the evaluation's epoch values are written."""
        t, results = self.trainer, self.context.results
        if t.hook.log_metrics is None or not t.is_global_zero or t.sanity_checking or results is None \
                or results.stage == "train" or not self.eval_counts:  # no row to write
            return
        counts = self.eval_counts["fit" if t.state.fn == "fit" else results.stage]
        where = (results.stage, self.context.dataloader_idx, counts.batch_idx)
        if where[2] < 0:  # between batches: an epoch-level hook, which has no step row
            return
        if self._eval_row and where != self._eval_row_at:
            self.write_eval_step()
        self._eval_row_at = where
        self._eval_row[key] = value

    def write_eval_step(self) -> None:
        """Lightning's axis: hand the held row of the evaluation batch that ran last to the ``log_metrics`` hook,
        at the batches its dataloader ran before it."""
        row, (_, dl_idx, batch_idx) = self._eval_row, self._eval_row_at
        if not row:
            return
        self._eval_row = {}
        t = self.trainer
        step = int(self._eval_seen.get(dl_idx, 0)) + batch_idx
        t.hook.log_metrics(trainer=t, metrics=to_floats(row), step=step)

    def publish_epoch_value(self, entry: MetricEntry, value: torch.Tensor | None) -> None:
        t = self.trainer
        if value is None:
            return
        if entry.sync_dist and t.world_size > 1 and entry.metric is None:
            value = t.hook.reduce(trainer=t, tensor=value, op=_sync_op(entry))
        key = entry.epoch_key
        self.callback_metrics[key] = value
        if entry.on_step:
            self.callback_metrics[entry.name] = value
        if entry.logger:
            self.logged_metrics[key] = value
        if entry.prog_bar:
            self.progress_bar_metrics[key] = value

    def publish_epoch(self, results: Results) -> None:
        """Reduce the epoch values of ``results`` into ``callback_metrics`` (:meth:`epoch_results` reads them back)."""
        for entry, value in results.epoch_values().values():
            self.publish_epoch_value(entry, value)

    def epoch_results(self, results: Results) -> dict[str, torch.Tensor]:
        """The epoch values of ``results`` as published (reduced across processes under ``sync_dist``), without
        reducing them again."""
        return {entry.epoch_key: self.callback_metrics.get(entry.epoch_key, value)
                for entry, value in results.epoch_values().values()}

    @contextlib.contextmanager
    def scratch(self) -> Iterator[None]:
        """What is published inside is seen by the hooks that run inside (the sanity check's values by its
        ``on_validation_epoch_end``), then forgotten: the published values are put back as they were (Lightning)."""
        kept = [dict(d) for d in (self.callback_metrics, self.logged_metrics, self.progress_bar_metrics)]
        try:
            yield
        finally:
            for published, before in zip((self.callback_metrics, self.logged_metrics, self.progress_bar_metrics),
                                         kept):
                published.clear()
                published.update(before)

    def reset(self) -> None:
        """Forget every published value: each ``fit``/``validate``/``test`` starts with none (Lightning)."""
        self.callback_metrics.clear()
        self.logged_metrics.clear()
        self.progress_bar_metrics.clear()
        self._eval_row, self._eval_seen = {}, {}

    def drop_step_values(self, results: Results) -> None:
        """After an evaluation epoch, ``callback_metrics`` keeps its epoch values only (Lightning)."""
        for entry in results.entries.values():
            if entry.on_step:
                self.callback_metrics.pop(entry.step_key, None)

    def write_step(self, results: Results) -> None:
        """Hand the values the batch that just ended logged per step to the ``log_metrics`` hook."""
        t = self.trainer
        if not t.is_global_zero or t.sanity_checking:
            return
        serial = self.progress.batches_seen - 1
        fresh = {e.step_key: e.last for e in results.entries.values()
                 if e.on_step and e.logger and e.last is not None and e.serial == serial}
        if fresh:
            self._write(fresh)

    def write_epoch(self, results: Results) -> None:
        """Hand the epoch values of ``results`` to the ``log_metrics`` hook."""
        t = self.trainer
        if not t.is_global_zero or t.sanity_checking:
            return
        if self.lightning_steps and results.stage != "train":
            self._end_eval_rows(results.stage)
        values = {}
        for entry in results.entries.values():
            # a name logged in an earlier epoch only (say in on_train_epoch_start of epoch 0) is not written again
            if entry.on_epoch and entry.logger and entry.has_epoch_values:
                name = entry.epoch_key
                value = self.callback_metrics.get(name)
                if value is not None:
                    values[name] = value
        if values:
            self._write(values)

    def _end_eval_rows(self, stage: str) -> None:
        """Lightning's axis, at an evaluation's end: its last batch's row is written, and the fit's validation
        batches counted on, per dataloader."""
        self.write_eval_step()
        t = self.trainer
        if t.state.fn != "fit" or stage != "validate":
            return
        for i, n in enumerate(t.num_val_batches or ()):
            if n != float("inf"):
                self._eval_seen[i] = self._eval_seen.get(i, 0) + n

    def lightning_step(self) -> int:
        """The step of a row on Lightning's axis: the batches that stepped (optimizer steps under automatic
        optimization, every batch under manual), less the one that just ran inside a fit."""
        t, p = self.trainer, self.progress
        count = p.global_step if getattr(t.module, "automatic_optimization", True) else p.batches_seen
        return count - 1 if t.state.fn == "fit" else count

    def _write(self, values: dict[str, Any]) -> None:
        t, progress = self.trainer, self.progress
        metrics = to_floats(values)
        if not self.lightning_steps:
            metrics["epoch"] = float(progress.current_epoch)
            t.hook.log_metrics(trainer=t, metrics=metrics, step=progress.global_step)
            return
        given = metrics.pop("step", None)  # a value logged as "step" is the row's step (Lightning)
        if given is None:
            metrics["epoch"] = float(progress.current_epoch)
        t.hook.log_metrics(trainer=t, metrics=metrics, step=self.lightning_step() if given is None else int(given))


#: A stage set by hand outside a run: the loop's results it logs into, and its ``self.log`` defaults.
_BY_HAND = {"train": ("train_results", STEP), "validate": ("val_results", EVAL_STEP),
            "test": ("test_results", EVAL_STEP)}


def _check_metric_owner(module: Any, name: str, metric: Any) -> None:
    """A logged ``Metric`` must be one of the module's submodules (as in Lightning): one made anew at every step
    would give the epoch the last step's state only, and would be saved in no checkpoint."""
    if not isinstance(module, torch.nn.Module) or any(m is metric for m in module.modules()):
        return
    owned = [n for n, m in module.named_modules() if n and hasattr(m, "compute") and hasattr(m, "update")]
    if not owned:
        raise ConfigurationError(
            f"self.log({name!r}, <{type(metric).__name__}>) logged a torchmetrics Metric that is not an attribute of "
            f"{type(module).__name__}, and the module holds no Metric: create it once in __init__ and log that "
            "attribute (you can fix this by setting an attribute for the metric in your LightningModule).")
    raise ConfigurationError(
        f"self.log({name!r}, <{type(metric).__name__}>) logged a torchmetrics Metric that is not an attribute of "
        f"{type(module).__name__}: log the attribute that holds it, or name it by calling "
        f"`self.log({name}, ..., metric_attribute=name)` where `name` is one of {owned}.")


def _sync_op(entry: MetricEntry) -> str:
    """The collective that ``sync_dist`` applies: the entry's own reduction, or a mean for a callable one."""
    return entry.reduce_fx if isinstance(entry.reduce_fx, str) else "mean"


def _infer_batch_size(batch: Any) -> float:
    if isinstance(batch, torch.Tensor):
        return float(batch.shape[0]) if batch.dim() else 1.0
    if isinstance(batch, dict):
        batch = list(batch.values())
    # lists and tuples first: the usual batches, without the slower check against the Iterable ABC
    if isinstance(batch, (list, tuple)) or (isinstance(batch, Iterable) and not isinstance(batch, (str, bytes))):
        for item in batch:
            size = _infer_batch_size(item)
            if size:
                return size
    return 1.0
