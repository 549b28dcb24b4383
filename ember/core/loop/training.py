"""One training epoch: its batches, their optimization, the schedulers and the validation schedule.

Events of one epoch (``k`` = ``accumulate_grad_batches``)::

    on_train_epoch_start
    per batch:
        batch to device -> on_train_batch_start (-1 ends the epoch)
        training_step
        [first batch of a window of k] on_before_zero_grad -> zero_grad
        on_before_backward -> backward -> on_after_backward
        [last batch of a window, or of the epoch]
            unscale -> on_before_optimizer_step -> clip -> optimizer step (global_step += 1)
        [scheduler steps] -> on_train_batch_end -> [log_metrics]
        [validation when due] -> [per-step plateau schedulers] -> [safe point: checkpoints, stop on a signal]
    [validation when due at the epoch's end]
    (epoch metrics published) -> on_train_epoch_end -> [plateau schedulers] -> [log_metrics]
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.loop import module_overrides, state
from ember.core.loop import schedulers as schedulers
from ember.core.loop.data import length, set_sampler_epoch, with_last
from ember.core.loop.optim import ManualOptimizer, batch_with_optimizer_step, passes_closure, step_outputs
from ember.core.loop.state import EPOCH_HOOK, IDLE, PROCESSED, READY, STARTED, STEP, EpochMarks, FitProgress

if TYPE_CHECKING:
    from ember.core.loop.parts import LoopsLike


class TrainingLoop:
    """The training epochs of a fit."""

    def __init__(self, loop: LoopsLike) -> None:
        self.loop = loop
        self.t = loop.t
        self.progress = loop.progress
        self.train_loader: Any = None
        #: The loader as the data source gave it (``train_loader`` is its resumable copy, the one iterated).
        self.given_train_loader: Any = None
        self.val_loaders: list[Any] = []
        #: The batches validation takes of each of ``val_loaders`` (loaders iterated together count once).
        self.val_nums: list[float] = []
        #: Whether the fit validates (validation data, ``validation_step``, ``limit_val_batches`` not 0), known
        #: before its loaders are asked for; whether they have been, and the epochs the loaders were last read at.
        self.validates = False
        self.val_loaded = False
        self.val_loaded_epoch = -math.inf
        self.train_loaded_epoch = -math.inf
        #: The module's own optimizer_step, lr_scheduler_step, ... (ember.core.loop.module_overrides), per fit.
        self.overrides = module_overrides.NONE
        #: What manual_backward passes to Tensor.backward (retain_graph=...); whether the fit said min_* wait.
        self.backward_args: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})
        self.said_min_unmet = False
        #: During an optimizer step: the closure for one that evaluates the loss (LBFGS); opt.step's kwargs.
        self.step_closure: Any = None
        self.step_kwargs: dict[str, Any] = {}
        #: What the optimizer's ``step`` returned, as the plugin that stepped it says (read by ``opt.step()``).
        self.step_result: Any = None
        #: The next epoch keeps the training results as they are (``on_train_start`` logged into them).
        self.keep_results = False
        #: Under a time-based ``val_check_interval``: its seconds, and when the last validation (or the fit) began.
        self.val_seconds: float | None = None
        self.last_val_time = 0.0
        #: Where the running epoch stands (read by ``trainer.fit_loop``, :mod:`ember.core.loop.loop_views`).
        self.marks = EpochMarks()
        #: The last batch of the last epoch when ``max_steps`` ended it before its last batch, else None (a
        #: checkpoint written after that epoch resumes inside it; see ``Loops.state_dict``).
        self.stopped_after: int | None = None

    def reset_data(self, validates: bool) -> None:
        """At the start of a fit: no loader has been asked for yet."""
        self.train_loader = self.given_train_loader = None
        self.val_loaders, self.val_nums, self.validates, self.val_loaded = [], [], validates, False
        self.val_loaded_epoch = self.train_loaded_epoch = -math.inf

    def load_val_data_if_due(self) -> None:
        """Ask for the validation loaders when validation first runs, and again when
        ``reload_dataloaders_every_n_epochs`` epochs have passed since. A sanity check's reading counts as the
        first epoch's only where that epoch validates (Lightning's rule)."""
        t, epoch = self.t, self.progress.current_epoch
        every = t.config.reload_dataloaders_every_n_epochs
        if self.val_loaded and not (every and epoch - self.val_loaded_epoch >= every):
            return
        if not t.sanity_checking or self._validates_epoch():
            self.val_loaded_epoch = epoch
        self.loop.load_val_data()
        self.val_loaded = True

    def load_val_data_before_training(self) -> None:
        """Before ``on_train_start``: the validation loaders of a first epoch that validates are read now if no
        sanity check read them (so that their lengths are known from the start, as in Lightning)."""
        t = self.t
        if self.validates and not self.val_loaded and self._validates_epoch():
            t.state.stage = "validate"
            self.load_val_data_if_due()
            t.state.stage = "train"

    def _validates_epoch(self) -> bool:
        every = self.t.config.check_val_every_n_epoch
        return every is None or (self.progress.current_epoch + 1) % every == 0

    # -- one epoch -----------------------------------------------------------------------------------------
    def start_fit(self) -> None:
        """Once per fit, after ``on_train_start``: find the module's own loop methods (looking them up costs
        tens of attribute lookups, too many for every epoch)."""
        self.overrides, self.said_min_unmet = module_overrides.overrides_of(self.t.module), False
        self.val_seconds = self.t.config.val_check_seconds
        if self.val_seconds is not None:
            self.last_val_time = time.monotonic()

    def run_epoch(self, resume: FitProgress | None = None) -> None:
        """One training epoch; ``resume``: continue it after the batch a checkpoint was written at."""
        batches, read_to_end = self._start_epoch(resume)
        scheds_stepped, self.stopped_after = self._run_batches(batches, read_to_end)
        self._end_epoch(scheds_stepped)

    def _start_epoch(self, resume: FitProgress | None) -> tuple[Any, bool]:
        loop, t = self.loop, self.t
        ckpt = t.checkpointing
        t.state.stage = "train"
        results = loop.train_results
        if resume is None:
            if not self.keep_results:  # else: what on_train_start logged belongs to this epoch
                results.reset()
            every = t.config.reload_dataloaders_every_n_epochs
            if every and self.progress.current_epoch - self.train_loaded_epoch >= every:
                loop.load_train_data()
        self.keep_results = False
        loop.log_context.enter(results, 1, EPOCH_HOOK)
        loader = self.train_loader
        set_sampler_epoch(loader, self.progress.current_epoch)
        self.marks.phase = READY
        if t.hook.on_train_epoch_start is not None:
            t.hook.on_train_epoch_start(trainer=t, module=t.module)
        n = t.num_training_batches
        # Reading the whole loader, ask it for one batch past the last, as a for-loop does: a sampler with its own
        # generator draws its next permutation only then (Lightning stops at len(loader) and skips that draw).
        read_to_end = n != math.inf and n == length(loader)
        start = 0
        if resume is not None:
            ckpt.restore_rng()
            start = resume.batch_idx + 1
            loader = ckpt.resumed_batches(start)
        else:
            loop.evaluation.counts["fit"].restart_total()  # Lightning's validation count is per epoch
        self._mark_batches_begin(start)
        return (enumerate(loader, start) if n != math.inf else with_last(loader, start)), read_to_end

    def _mark_batches_begin(self, start: int) -> None:
        """The epoch's batches begin at ``start``: no batch of it has run (``trainer.batch_idx`` reads
        ``start - 1`` until the first one begins)."""
        p, marks = self.progress, self.marks
        if marks.began:  # the previous epoch's batches that began and never ran (-1 from on_train_batch_start)
            marks.unfinished += p.batch_idx + 1 - (marks.first_batch + p.batches_seen - marks.seen)
        p.batch_idx = start - 1
        marks.phase, marks.began, marks.first_batch, marks.cut = STARTED, True, start, False
        marks.seen, marks.step = p.batches_seen, p.global_step

    def _run_batches(self, batches: Any, read_to_end: bool) -> tuple[bool, int | None]:
        """The batch loop (the hot path: hooks nobody implements cost an attribute test). Returns whether the
        epoch's scheduler steps were taken, and its last batch if ``max_steps`` ended it before its last one."""
        t, p, loop = self.t, self.progress, self.loop
        h, module, ckpt, ctx = t.hook, t.module, t.checkpointing, loop.log_context
        results, transfer, metrics = loop.train_results, loop.transfer, loop.metrics
        n, max_steps, every, by_stop = t.num_training_batches, loop.max_steps, t.config.log_every_n_steps, \
            metrics.lightning_steps  # Lightning's axis writes the step values of the batch that stops the fit
        automatic = getattr(module, "automatic_optimization", True)
        by_batch = metrics.lightning_steps and not automatic  # Lightning's logging interval counts batches then
        step_fn = self.automatic_batch if automatic else self.manual_batch
        if automatic and (self.overrides.optimizer_step is not None
                          or (t.optimizers and passes_closure(t.optimizers[0]))):
            step_fn = functools.partial(batch_with_optimizer_step, self)
        val_every, val_at_end, val_across = self.validation_schedule()
        val_secs = self.validation_seconds()  # time-based: the clock alone says when (at an epoch's end too)
        scheds_stepped = is_last = False
        for batch_idx, batch in batches:
            if n == math.inf:
                batch, is_last = batch
            else:
                is_last = batch_idx + 1 >= n
            p.batch_idx = batch_idx
            ctx.defaults = STEP
            batch = transfer(batch, 0)
            if h.on_train_batch_start is not None:
                if -1 in h.on_train_batch_start(trainer=t, module=module, batch=batch, batch_idx=batch_idx):
                    scheds_stepped = self._cut_short(automatic)
                    break
            step_before = p.global_step
            outputs = step_fn(batch, batch_idx, is_last)
            if automatic and t.lr_scheduler_configs:
                if p.global_step != step_before:
                    schedulers.step(self, "step", plateau=False)
                if is_last:
                    schedulers.step(self, "epoch")
                    scheds_stepped = True
            if h.on_train_batch_end is not None:
                h.on_train_batch_end(trainer=t, module=module, outputs=step_outputs(outputs), batch=batch,
                                     batch_idx=batch_idx)
            p.batches_seen += 1
            if is_last and read_to_end:  # before validation, as the plain loop's for-statement ends first
                next(batches, None)
            if h.log_metrics is not None and (by_batch or p.global_step != step_before) and \
                    ((p.batches_seen if by_batch else p.global_step) % every == 0 or (p.should_stop and by_stop)):
                metrics.write_step(results)
            # Lightning validates after the batch that set should_stop too (when the fit may stop now)
            if (is_last and val_at_end) or (val_every and (batch_idx + 1) % val_every == 0) \
                    or (val_across and p.batches_seen % val_across == 0) \
                    or (p.should_stop and self._validate_on_stop()) \
                    or (val_secs is not None and time.monotonic() - self.last_val_time >= val_secs):
                self.run_validation()
            if automatic and p.global_step != step_before and t.lr_scheduler_configs:
                schedulers.step(self, "step", plateau=True)
            if is_last or (max_steps != -1 and p.global_step >= max_steps) or (p.should_stop and self.can_stop()):
                break
            if ckpt.safe_point_due:  # after the batch and its validation: write requested checkpoints, ...
                ckpt.safe_point(batch_idx)
        ctx.batch = None
        return scheds_stepped, None if is_last or self.marks.cut or not 0 <= max_steps <= p.global_step else p.batch_idx

    def _cut_short(self, automatic: bool) -> bool:
        """-1 from ``on_train_batch_start``: the skipped batch ends the epoch and counts as its last, as in Lightning
        (``trainer.is_last_batch``; both scheduler intervals step). Returns whether the schedulers stepped."""
        self.marks.cut = True
        if automatic and self.t.lr_scheduler_configs:
            schedulers.step(self, "step")
            schedulers.step(self, "epoch")
            return True
        return False

    def _end_epoch(self, scheds_stepped: bool) -> None:
        loop, t = self.loop, self.t
        h, results = t.hook, loop.train_results
        automatic = getattr(t.module, "automatic_optimization", True)
        # 'epoch' schedulers step only for an epoch that reached its last batch or that -1 ended (stepped then)
        t.state.stage = "train"
        loop.log_context.results = results
        loop.metrics.publish_epoch(results)
        loop.log_context.defaults = EPOCH_HOOK
        self.marks.phase = PROCESSED
        if h.on_train_epoch_end is not None:
            h.on_train_epoch_end(trainer=t, module=t.module)
        if automatic and t.lr_scheduler_configs and scheds_stepped:
            schedulers.step_plateau(self, "epoch")
        if h.log_metrics is not None:
            loop.metrics.write_epoch(results)
        self.progress.current_epoch += 1
        self.marks.phase = IDLE

    # -- when to stop --------------------------------------------------------------------------------------
    def done(self) -> bool:
        """The fit has no epoch left to run."""
        t, p, loop = self.t, self.progress, self.loop
        if t.num_training_batches == 0:
            return True
        if (loop.max_steps != -1 and p.global_step >= loop.max_steps) or \
                (loop.max_epochs != -1 and p.current_epoch >= loop.max_epochs):
            return True
        if p.should_stop and not self.can_stop():
            self.said_min_unmet = self.said_min_unmet or state.say_min_unmet(t.config)
        return bool(p.should_stop) and self.can_stop()

    def can_stop(self) -> bool:
        """``should_stop`` takes effect only after ``min_epochs`` and ``min_steps``."""
        cfg, p = self.t.config, self.progress
        return (cfg.min_epochs is None or p.current_epoch >= cfg.min_epochs) and \
            (cfg.min_steps is None or p.global_step >= cfg.min_steps)

    # -- one batch's optimization ----------------------------------------------------------------------
    def automatic_batch(self, batch: Any, batch_idx: int, is_last: bool) -> Any:
        t = self.t
        h, module = t.hook, t.module
        k = t.config.accumulate_grad_batches
        out = h.step(trainer=t, model=t.model, module=module, batch=batch, batch_idx=batch_idx,
                     dataloader_idx=0, stage="train")
        if type(out) is torch.Tensor:  # the common case, without a call (loss_of takes tensor subclasses)
            loss: torch.Tensor | None = out
        else:
            loss = module_overrides.loss_of(out)
            if out is None:  # skips backward only: zero_grad and the optimizer step keep their schedule (Lightning)
                out = {}
        if not t.optimizers:
            return out
        opt = t.optimizers[0]
        self.zero_grad_and_backward(loss, opt, batch_idx)
        if is_last or (batch_idx + 1) % k == 0:
            self.optimizer_step(opt, clip=True)
        return out

    def zero_grad_and_backward(self, loss: torch.Tensor | None, opt: Any, batch_idx: int) -> None:
        """Zero the gradients on the first batch of an accumulation window, then backward of ``loss`` divided by
        the window's length (no backward when ``training_step`` returned None)."""
        t = self.t
        h, module, k = t.hook, t.module, t.config.accumulate_grad_batches
        if batch_idx % k == 0:
            if h.on_before_zero_grad is not None:
                h.on_before_zero_grad(trainer=t, module=module, optimizer=opt)
            h.zero_grad(trainer=t, module=module, optimizer=opt)
        if loss is not None:
            self.backward(loss / k if k > 1 else loss, opt)

    def manual_batch(self, batch: Any, batch_idx: int, is_last: bool) -> Any:
        t = self.t
        return t.hook.step(trainer=t, model=t.model, module=t.module, batch=batch, batch_idx=batch_idx,
                           dataloader_idx=0, stage="train")

    def backward(self, loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward`` -> the precision's backward -> ``on_after_backward``; ``args``/``kwargs`` (from
        ``manual_backward``) go on to ``Tensor.backward``."""
        t = self.t
        h = t.hook
        if h.on_before_backward is not None:
            h.on_before_backward(trainer=t, module=t.module, loss=loss)
        if args or kwargs:
            module_overrides.check_backward_args(t)
            self.backward_args = (args, kwargs)
            try:
                h.backward(trainer=t, loss=loss, optimizer=optimizer)
            finally:
                self.backward_args = ((), {})
        else:
            h.backward(trainer=t, loss=loss, optimizer=optimizer)
        if h.on_after_backward is not None:
            h.on_after_backward(trainer=t, module=t.module)

    def closure_optimizer(self, optimizer: torch.optim.Optimizer) -> ManualOptimizer:
        """The optimizer handed to a module's ``optimizer_step`` override (see :class:`ManualOptimizer`)."""
        return ManualOptimizer(optimizer, self, clip=True, count=False)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: bool, count: bool = True,
                       closure: Any = None, evaluated: Any = None, step_kwargs: dict[str, Any] | None = None) -> Any:
        """Unscale -> ``on_before_optimizer_step`` -> clip (automatic optimization: the module's
        ``configure_gradient_clipping`` when it has one) -> step; counts a step unless ``count`` is False.

        ``closure``: for an optimizer that evaluates the loss itself (LBFGS), the closure that runs the training
        step and backward; it is handed to ``optimizer.step`` (as :attr:`step_closure`, which the fallback
        ``optimizer_step`` reads), and each evaluation is followed by the unscale, event and clipping above.
        ``evaluated``: a closure already run, which returns its result again (handed to ``optimizer.step`` the same
        way, so that the optimizer sees a closure as in Lightning). ``step_kwargs``: what ``opt.step(closure,
        **kwargs)`` got besides the closure, passed on to the optimizer's ``step`` (as :attr:`step_kwargs`).
        Returns the closure's first result."""
        if closure is None:
            self._before_step(optimizer, clip)
            if evaluated is None and not step_kwargs:
                self.t.hook.optimizer_step(trainer=self.t, module=self.t.module, optimizer=optimizer)
            else:
                self.step_closure, self.step_kwargs = evaluated, step_kwargs or {}
                try:
                    self.t.hook.optimizer_step(trainer=self.t, module=self.t.module, optimizer=optimizer)
                finally:
                    self.step_closure, self.step_kwargs = None, {}
        else:
            results: list[Any] = []

            def evaluate() -> Any:
                result = closure()
                results.append(result)
                self._before_step(optimizer, clip)
                return result

            self.step_closure, self.step_kwargs = evaluate, step_kwargs or {}
            try:
                self.t.hook.optimizer_step(trainer=self.t, module=self.t.module, optimizer=optimizer)
            finally:
                self.step_closure, self.step_kwargs = None, {}
            if not results:
                raise ConfigurationError(
                    f"{type(optimizer).__name__}.step was given a closure that runs training_step and backward, but "
                    "it was never evaluated: the optimizer's step must call it (or the active plugin's "
                    "optimizer_step call optimizer.step(trainer.loop.training.step_closure)).")
        if count:
            self.progress.global_step += 1
        return results[0] if closure is not None else None

    def _before_step(self, optimizer: torch.optim.Optimizer, clip: bool) -> None:
        t = self.t
        h, module = t.hook, t.module
        if h.unscale_gradients is not None:
            h.unscale_gradients(trainer=t, optimizer=optimizer)
        if h.on_before_optimizer_step is not None:
            h.on_before_optimizer_step(trainer=t, module=module, optimizer=optimizer)
        clip_val, algorithm = t.config.gradient_clip_val, t.config.gradient_clip_algorithm
        if clip and (configure := self.overrides.configure_gradient_clipping) is not None:  # by keyword (Lightning)
            configure(optimizer, gradient_clip_val=clip_val, gradient_clip_algorithm=algorithm)
        elif clip and clip_val:
            h.clip_gradients(trainer=t, module=module, optimizer=optimizer, clip_val=clip_val,
                             algorithm=algorithm or "norm")

    def clip_gradients(self, optimizer: Any, clip_val: float, algorithm: str) -> Any:
        t = self.t
        if isinstance(clip_val, bool) or not isinstance(clip_val, (int, float)) or not 0 <= clip_val < float("inf"):
            raise ConfigurationError(f"clip_gradients(gradient_clip_val={clip_val!r}) is invalid: expected a finite "
                                     "number >= 0.")
        return t.hook.clip_gradients(trainer=t, module=t.module, optimizer=optimizer, clip_val=clip_val,
                                     algorithm=algorithm)

    # -- validation within the fit -------------------------------------------------------------------------
    def validation_schedule(self) -> tuple[int, bool, int]:
        """When this epoch validates, as ``(every, at_end, across)``: after each batch ``i`` with ``(i + 1) % every
        == 0`` (0: never so), after its last batch (``at_end``), or after each batch that brings the fit's batch
        count to a multiple of ``across`` (0: never so). Fixed for an epoch, so it is worked out once per epoch.
        A time-based ``val_check_interval`` schedules nothing here (see :meth:`validation_seconds`)."""
        t, cfg = self.t, self.t.config
        if self.val_seconds is not None or not self.validates:
            return 0, False, 0
        every_epoch = cfg.check_val_every_n_epoch
        vci = None if cfg.fast_dev_run else cfg.val_check_interval
        if every_epoch is None:  # int val_check_interval counted across epochs (checked by TrainerConfig)
            assert isinstance(vci, int)
            return 0, False, vci
        if (self.progress.current_epoch + 1) % every_epoch:
            return 0, False, 0
        if vci is None or (isinstance(vci, float) and vci == 1.0):
            return 0, True, 0
        return (vci if isinstance(vci, int) else max(1, int(t.num_training_batches * vci))), False, 0

    def validation_seconds(self) -> float | None:
        """Under a time-based ``val_check_interval``, in an epoch ``check_val_every_n_epoch`` lets validate: the
        seconds after which a batch end validates (since the fit's start or the last validation); else None."""
        every_epoch = self.t.config.check_val_every_n_epoch
        if self.val_seconds is None or not self.validates:
            return None
        if every_epoch is not None and (self.progress.current_epoch + 1) % every_epoch != 0:
            return None
        return self.val_seconds

    def _validate_on_stop(self) -> bool:
        """``should_stop`` is set and the fit may stop: validate now if this epoch validates at all (Lightning's
        rule; an epoch that ends at ``max_steps`` or by ``-1`` from ``on_train_batch_start`` does not)."""
        if not self.can_stop() or not self.validates:
            return False
        return self._validates_epoch()

    def _window_open(self) -> bool:
        """An accumulation window is open after the current batch (its gradients wait for more batches)."""
        t, i = self.t, self.progress.batch_idx
        if not getattr(t.module, "automatic_optimization", True) or i + 1 >= t.num_training_batches:
            return False
        return (i + 1) % t.config.accumulate_grad_batches != 0

    def run_validation(self) -> None:
        """A validation run inside the fit; the training's logging context is handed back as it was."""
        loop, t = self.loop, self.t
        h = t.hook
        t.state.stage = "validate"
        if not self._window_open():  # with no implementation, the default (gradients dropped) without a call
            if h.on_validation_model_zero_grad is None:
                module_overrides.drop_gradients(trainer=t, module=t.module)
            else:  # no self.log inside (Lightning)
                loop.log_context.call_refusing("on_validation_model_zero_grad", h.on_validation_model_zero_grad,
                                               trainer=t, module=t.module)
        self.load_val_data_if_due()
        if not self.val_loaders or not any(self.val_nums):
            t.state.stage = "train"
            return
        saved = loop.log_context.saved()
        loop.evaluation.run("validate", self.val_loaders, self.val_nums)  # writes the epoch's values to the loggers
        if self.val_seconds is not None:
            self.last_val_time = time.monotonic()
        loop.log_context.restore(saved)
        t.state.stage = "train"
