"""The loops: fit (epochs of training batches with validation), evaluation (validate/test) and predict.

The order of events is the contract of design.md section 5 (Lightning 2.x as it runs); the module
docstring of :mod:`ember.hookspecs.events` shows it as pseudocode. The hot path (one training batch) reads
hooks from the per-run :class:`~ember.core.plugin_manager.HookTable`, where a hook nobody implements is None
and is skipped for the price of an attribute test.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from typing import TYPE_CHECKING, Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.metrics import MetricLog
from ember.core.optim import parse_optimizers
from ember.core.results import Results
from ember.core.seed import preserved_rng
from ember.core.state import FitProgress, LogContext, Progress

if TYPE_CHECKING:
    from ember.core.trainer import Trainer

_LOADER_METHODS = {"train": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader",
                   "predict": "predict_dataloader"}
_HOOK_STAGE = {"validate": "validation", "test": "test", "predict": "predict"}
_LIMIT_ARG = {"train": "limit_train_batches", "validate": "limit_val_batches", "test": "limit_test_batches",
              "predict": "limit_predict_batches"}
# (default on_step, default on_epoch, called from an epoch-level hook) for self.log
_STEP_CTX = (True, False, False)
_EPOCH_HOOK_CTX = (False, True, True)
_EVAL_STEP_CTX = (False, True, False)


class ManualOptimizer:
    """What ``self.optimizers()`` returns under manual optimization: ``step()`` runs the precision's and
    strategy's step and the ``on_before_optimizer_step`` event, and counts ``global_step``."""

    def __init__(self, loops: Loops, optimizer: torch.optim.Optimizer) -> None:
        self._loops = loops
        self.optimizer = optimizer

    def step(self, closure: Any = None) -> Any:
        result = closure() if closure is not None else None
        self._loops.optimizer_step(self.optimizer, clip=False)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self.optimizer!r})"


class Loops:
    """Runs one ``fit``/``validate``/``test``/``predict`` for its trainer."""

    def __init__(self, trainer: Trainer) -> None:
        self.t = trainer
        self.max_epochs = -1
        self.max_steps = -1
        #: The run state this loop owns; the Trainer's properties read it.
        self.progress = Progress()
        self.log_context = LogContext()
        self.metrics = MetricLog(trainer, self.log_context, self.progress)
        #: What ``self.optimizers()`` returns under manual optimization.
        self.manual_optimizers: list[ManualOptimizer] = []
        self.train_results = Results("train")
        self.val_results = Results("validate")
        self.test_results = Results("test")

    # -- set-up shared by every run ----------------------------------------------------------------------
    def run(self, fn: str, loaders: dict[str, Any], options: dict[str, Any]) -> Any:
        t, cfg = self.t, self.t.config
        h = t.hook
        fdr = cfg.fast_dev_batches
        self.max_steps = fdr if fdr else cfg.max_steps
        if fdr:
            self.max_epochs = 1
        elif cfg.max_epochs is None:
            self.max_epochs = 1000 if cfg.max_steps == -1 else -1
        else:
            self.max_epochs = cfg.max_epochs
        if h.configure is not None:
            h.configure(trainer=t)
        info = h.distributed_info(trainer=t)
        t.global_rank, t.local_rank = info["global_rank"], info["local_rank"]
        t.node_rank, t.world_size = info.get("node_rank", 0), info["world_size"]
        if h.launch is not None:
            status = h.launch(trainer=t, fn=fn)
            if status is not None:  # the job ran in the processes the strategy started; this one is done
                t.state.status = "launched"
                raise SystemExit(status)
        if h.setup_environment is not None:
            h.setup_environment(trainer=t)
        if cfg.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=cfg.deterministic == "warn")
        if cfg.benchmark is not None:
            torch.backends.cudnn.benchmark = cfg.benchmark
        t.root_device = h.root_device(trainer=t)
        if h.setup_device is not None:
            h.setup_device(trainer=t, device=t.root_device)
        if h.prepare_data is not None and t.local_rank == 0:
            h.prepare_data(trainer=t)
        if t.world_size > 1:
            h.barrier(trainer=t, name="prepare_data")
        module = t.module
        if h.setup is not None:
            h.setup(trainer=t, module=module, stage=fn)
        t.state.setup_done = True
        if h.configure_model is not None:
            with h.model_sharded_context(trainer=t):
                h.configure_model(trainer=t, module=module)
        module.to(t.root_device)
        converted = h.convert_module(trainer=t, module=module) if h.convert_module is not None else None
        if converted is not None and converted is not module:
            t.module = module = converted
        t.model = module
        t.ckpt_path = None
        if options.get("ckpt_path"):
            self.restore(options["ckpt_path"], options.get("weights_only", True))
        if fn == "fit":
            return self.fit(loaders)
        if fn == "predict":
            return self.predict(loaders["predict"], options.get("return_predictions", True))
        return self.evaluate_entry(fn, loaders[fn], options.get("verbose", True))

    def restore(self, ckpt_path: str, weights_only: bool = True) -> None:
        """Load the module's weights from the checkpoint; a fit restores the rest once its optimizers exist."""
        self.t.checkpointing.restore(ckpt_path, weights_only)

    # -- data ----------------------------------------------------------------------------------------------
    def loaders(self, stage: str, given: Any) -> list[Any]:
        t = self.t
        if given is None:
            for source in (t.datamodule, t.module):
                method = getattr(source, _LOADER_METHODS[stage], None) if source is not None else None
                if callable(method):
                    given = method()
                    break
        if given is None:
            return []
        if isinstance(given, (list, tuple)) and given and all(_is_loader(g) for g in given):
            items = list(given)
        else:
            items = [given]
        out = []
        for loader in items:
            processed = t.hook.process_dataloader(trainer=t, dataloader=loader, stage=stage)
            out.append(loader if processed is None else processed)
        return out

    def num_batches(self, stage: str, loader: Any) -> float:
        try:
            n: float = len(loader)
        except TypeError:
            n = math.inf
        cfg = self.t.config
        if cfg.fast_dev_batches:
            return min(n, cfg.fast_dev_batches)
        limit = getattr(cfg, _LIMIT_ARG[stage])
        if limit is None:
            return n
        if isinstance(limit, int):
            return min(n, limit)
        if limit == 1.0:
            return n
        if n == math.inf:
            raise ConfigurationError(f"Trainer({_LIMIT_ARG[stage]}={limit}) is a fraction, but the {stage} data "
                                     "has no length; pass an int number of batches instead.")
        batches = int(n * limit)
        if batches == 0 and limit > 0:
            raise ConfigurationError(f"Trainer({_LIMIT_ARG[stage]}={limit}) gives 0 of the {int(n)} {stage} "
                                     "batches; use a larger fraction or an int.")
        return batches

    def transfer(self, batch: Any, dataloader_idx: int) -> Any:
        t = self.t
        h = t.hook
        if h.on_before_batch_transfer is not None:
            new = h.on_before_batch_transfer(trainer=t, module=t.module, batch=batch, dataloader_idx=dataloader_idx)
            batch = batch if new is None else new
        batch = h.batch_to_device(trainer=t, batch=batch, device=t.root_device, dataloader_idx=dataloader_idx)
        if h.on_after_batch_transfer is not None:
            new = h.on_after_batch_transfer(trainer=t, module=t.module, batch=batch, dataloader_idx=dataloader_idx)
            batch = batch if new is None else new
        if h.convert_input is not None:
            new = h.convert_input(trainer=t, data=batch)
            batch = batch if new is None else new
        self.log_context.batch = batch
        return batch

    # -- fit -----------------------------------------------------------------------------------------------
    def fit(self, loaders: dict[str, Any]) -> None:
        with self.t.checkpointing.fitting():
            self._fit(loaders)

    def _fit(self, loaders: dict[str, Any]) -> None:
        t = self.t
        h, module = t.hook, t.module
        ckpt = t.checkpointing
        train = self.loaders("train", loaders["train"])
        if not train:
            raise ConfigurationError("trainer.fit() found no training data: pass train_dataloaders=..., define "
                                     "train_dataloader() on the module, or pass a datamodule.")
        if len(train) > 1:
            raise ConfigurationError("trainer.fit() takes one training loader; combine several into one "
                                     "iterable that yields a batch per step.")
        self.train_loader = ckpt.train_loader(train[0])
        t.num_training_batches = self.num_batches("train", self.train_loader)
        if t.num_training_batches == 0 and t.config.limit_train_batches != 0:
            raise ConfigurationError(
                "trainer.fit() got an empty training loader (0 batches): its dataset is empty, or smaller than "
                "one batch with drop_last=True. Check the data; pass limit_train_batches=0 to skip training on "
                "purpose.")
        self.val_loaders = self.loaders("validate", loaders["validate"])
        t.num_val_batches = [self.num_batches("validate", dl) for dl in self.val_loaders]
        self._check_val_interval()
        self.setup_optimizers()
        resume = ckpt.restore_training()
        if h.log_hyperparams is not None and t.is_global_zero:
            h.log_hyperparams(trainer=t, params=self.hyperparameters())
        if h.on_fit_start is not None:
            h.on_fit_start(trainer=t, module=module)
        self.sanity_check()
        t.state.stage = "train"
        t.model.train()
        if h.on_train_start is not None:
            h.on_train_start(trainer=t, module=module)
        if resume is not None and resume.phase == "batch":
            self.train_epoch(resume)
        elif resume is not None:
            ckpt.restore_rng()
        while True:
            if ckpt.safe_point_due:  # between epochs: write requested checkpoints, stop on a signal
                ckpt.safe_point()
            if self.fit_done():
                break
            self.train_epoch()
        ckpt.end_training()
        t.state.stage = "train"
        if h.on_train_end is not None:
            h.on_train_end(trainer=t, module=module)
        if h.on_fit_end is not None:
            h.on_fit_end(trainer=t, module=module)

    def hyperparameters(self) -> dict[str, Any]:
        """The module's ``hparams`` and the DataModule's, for the loggers."""
        params: dict[str, Any] = {}
        for source in (self.t.module, self.t.datamodule):
            hparams = getattr(source, "hparams", None) if source is not None else None
            if isinstance(hparams, dict):
                params.update(hparams)
        return params

    def setup_optimizers(self) -> None:
        t = self.t
        module = t.module
        optimizers, schedulers = parse_optimizers(module.configure_optimizers())
        automatic = getattr(module, "automatic_optimization", True)
        cfg = t.config
        if not automatic and cfg.gradient_clip_val:
            raise ConfigurationError(
                f"Trainer(gradient_clip_val={cfg.gradient_clip_val}) clips under automatic optimization only; "
                "under manual optimization call self.clip_gradients(opt, gradient_clip_val=...) in training_step "
                "before opt.step(), and remove the Trainer argument.")
        if not automatic and cfg.accumulate_grad_batches > 1:
            raise ConfigurationError(
                f"Trainer(accumulate_grad_batches={cfg.accumulate_grad_batches}) accumulates under automatic "
                "optimization only; under manual optimization step the optimizer every N batches yourself.")
        if automatic and len(optimizers) > 1:
            raise ConfigurationError(
                f"configure_optimizers() returned {len(optimizers)} optimizers; automatic optimization steps one. "
                "Set `self.automatic_optimization = False` in __init__ and step them in training_step "
                "(see the manual optimization guide).")
        if not optimizers:
            warnings.warn("configure_optimizers() returned no optimizer: fit will run training_step without "
                          "optimizer steps.", stacklevel=4)
        t.optimizers = optimizers
        t.lr_scheduler_configs = schedulers
        model = t.hook.setup_module(trainer=t, module=module)
        t.model = module if model is None else model
        self.manual_optimizers = [ManualOptimizer(self, o) for o in optimizers]

    def _check_val_interval(self) -> None:
        vci = self.t.config.val_check_interval
        if isinstance(vci, float) and vci < 1.0 and self.t.num_training_batches == math.inf:
            raise ConfigurationError(f"Trainer(val_check_interval={vci}) is a fraction of an epoch, but the "
                                     "training data has no length; pass an int (every N batches).")
        if isinstance(vci, int) and self.t.config.check_val_every_n_epoch is not None \
                and vci > self.t.num_training_batches:
            raise ConfigurationError(
                f"Trainer(val_check_interval={vci}) is larger than the {self.t.num_training_batches} training "
                "batches of an epoch; lower it, or pass check_val_every_n_epoch=None to count batches across "
                "epochs.")

    def fit_done(self) -> bool:
        t = self.t
        if t.num_training_batches == 0:
            return True
        if self.max_steps != -1 and self.progress.global_step >= self.max_steps:
            return True
        if self.max_epochs != -1 and self.progress.current_epoch >= self.max_epochs:
            return True
        return bool(self.progress.should_stop) and self._can_stop()

    def _can_stop(self) -> bool:
        cfg = self.t.config
        return (cfg.min_epochs is None or self.progress.current_epoch >= cfg.min_epochs) and \
            (cfg.min_steps is None or self.progress.global_step >= cfg.min_steps)

    def sanity_check(self) -> None:
        t, cfg = self.t, self.t.config
        steps = 0 if cfg.fast_dev_run else cfg.num_sanity_val_steps
        if not self.val_loaders or steps == 0 or not any(t.num_val_batches):
            return
        t.num_sanity_val_batches = [n if steps == -1 else min(n, steps) for n in t.num_val_batches]
        h = t.hook
        t.state.sanity_checking = True
        try:
            # The sanity check leaves the random state as it found it: training then draws the same numbers
            # (shuffling, dropout) as a run without it, and as the plain loop a user would write.
            with preserved_rng(t.root_device):
                if h.on_sanity_check_start is not None:
                    h.on_sanity_check_start(trainer=t, module=t.module)
                self.evaluate("validate", self.val_loaders, t.num_sanity_val_batches)
                if h.on_sanity_check_end is not None:
                    h.on_sanity_check_end(trainer=t, module=t.module)
        finally:
            t.state.sanity_checking = False

    def train_epoch(self, resume: FitProgress | None = None) -> None:
        """One training epoch; ``resume``: continue it after the batch a checkpoint was written at."""
        t, cfg = self.t, self.t.config
        h, module = t.hook, t.module
        ckpt = t.checkpointing
        t.state.stage = "train"
        results = self.train_results
        if resume is None:
            results.reset()
        self.log_context.enter(results, 1, _EPOCH_HOOK_CTX)
        loader = self.train_loader
        sampler = getattr(loader, "sampler", None)
        for s in (sampler, getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
            set_epoch = getattr(s, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.progress.current_epoch)
        self.log_context.defaults = _EPOCH_HOOK_CTX
        if h.on_train_epoch_start is not None:
            h.on_train_epoch_start(trainer=t, module=module)
        n = t.num_training_batches
        automatic = getattr(module, "automatic_optimization", True)
        step_fn = self.automatic_batch if automatic else self.manual_batch
        log_metrics = h.log_metrics
        every = cfg.log_every_n_steps
        validated_at_end = False
        epoch_scheds_stepped = False
        # Reading the whole loader, ask it for one batch past the last, as a for-loop does: a sampler with
        # its own generator draws its next permutation only then, and skipping that draw would shuffle every
        # later epoch differently from the plain loop (Lightning stops at len(loader) and does skip it).
        read_to_end = n != math.inf and n == _length(loader)
        start = 0
        if resume is not None:
            ckpt.restore_rng()
            start = resume.batch_idx + 1
            loader = ckpt.resumed_batches(start)
        batches = enumerate(loader, start) if n != math.inf else _with_last(loader, start)
        for batch_idx, batch in batches:
            if n == math.inf:
                batch, is_last = batch
            else:
                is_last = batch_idx + 1 >= n
            self.progress.batch_idx = batch_idx
            self.log_context.defaults = _STEP_CTX
            batch = self.transfer(batch, 0)
            if h.on_train_batch_start is not None:
                answers = h.on_train_batch_start(trainer=t, module=module, batch=batch, batch_idx=batch_idx)
                if -1 in answers:
                    break
            step_before = self.progress.global_step
            outputs = step_fn(batch, batch_idx, is_last)
            if automatic and t.lr_scheduler_configs:
                if self.progress.global_step != step_before:
                    self.step_schedulers("step")
                if is_last:
                    self.step_schedulers("epoch")
                    epoch_scheds_stepped = True
            if h.on_train_batch_end is not None:
                h.on_train_batch_end(trainer=t, module=module, outputs=_outputs(outputs), batch=batch,
                                     batch_idx=batch_idx)
            self.progress.batches_seen += 1
            if is_last and read_to_end:  # before validation, as the plain loop's for-statement ends first
                next(batches, None)
            if log_metrics is not None and self.progress.global_step != step_before and self.progress.global_step % every == 0:
                self.metrics.write_step(results)
            if self.should_validate(batch_idx, is_last):
                self.run_validation()
                validated_at_end = is_last
            if is_last or (self.max_steps != -1 and self.progress.global_step >= self.max_steps):
                break
            if self.progress.should_stop and self._can_stop():
                break
            if ckpt.safe_point_due:  # after the batch and its validation: write requested checkpoints, ...
                ckpt.safe_point(batch_idx)
        self.log_context.batch = None
        if automatic and t.lr_scheduler_configs and not epoch_scheds_stepped:
            self.step_schedulers("epoch")
        if not validated_at_end and self._epoch_end_validation_due():
            self.run_validation()
        t.state.stage = "train"
        self.log_context.results = results
        self.metrics.publish_epoch(results)
        self.log_context.defaults = _EPOCH_HOOK_CTX
        if h.on_train_epoch_end is not None:
            h.on_train_epoch_end(trainer=t, module=module)
        if automatic and t.lr_scheduler_configs:
            self.step_plateau("epoch")
        if log_metrics is not None:
            self.metrics.write_epoch(results)
        self.progress.current_epoch += 1

    def automatic_batch(self, batch: Any, batch_idx: int, is_last: bool) -> Any:
        t = self.t
        h, module = t.hook, t.module
        k = t.config.accumulate_grad_batches
        out = h.step(trainer=t, model=t.model, module=module, batch=batch, batch_idx=batch_idx,
                     dataloader_idx=0, stage="train")
        if out is None:
            return None
        if isinstance(out, torch.Tensor):
            loss = out
        elif isinstance(out, dict) and "loss" in out:
            loss = out["loss"]
        else:
            raise ConfigurationError(f"training_step returned {type(out).__name__}; return the loss tensor, a dict "
                                     "with a 'loss' key, or None to skip the batch.")
        if not t.optimizers:
            return out
        opt = t.optimizers[0]
        if batch_idx % k == 0:
            if h.on_before_zero_grad is not None:
                h.on_before_zero_grad(trainer=t, module=module, optimizer=opt)
            h.zero_grad(trainer=t, module=module, optimizer=opt)
        self.backward(loss / k if k > 1 else loss, opt)
        if is_last or (batch_idx + 1) % k == 0:
            self.optimizer_step(opt, clip=True)
        return out

    def manual_batch(self, batch: Any, batch_idx: int, is_last: bool) -> Any:
        t = self.t
        return t.hook.step(trainer=t, model=t.model, module=t.module, batch=batch, batch_idx=batch_idx,
                           dataloader_idx=0, stage="train")

    def clip_gradients(self, optimizer: Any, clip_val: float, algorithm: str) -> Any:
        t = self.t
        if isinstance(clip_val, bool) or not isinstance(clip_val, (int, float)) or not 0 <= clip_val < float("inf"):
            raise ConfigurationError(f"clip_gradients(gradient_clip_val={clip_val!r}) is invalid: expected a finite "
                                     "number >= 0.")
        return t.hook.clip_gradients(trainer=t, module=t.module, optimizer=optimizer, clip_val=clip_val,
                                     algorithm=algorithm)

    def backward(self, loss: torch.Tensor, optimizer: Any) -> None:
        t = self.t
        h = t.hook
        if h.on_before_backward is not None:
            h.on_before_backward(trainer=t, module=t.module, loss=loss)
        h.backward(trainer=t, loss=loss, optimizer=optimizer)
        if h.on_after_backward is not None:
            h.on_after_backward(trainer=t, module=t.module)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: bool) -> None:
        t = self.t
        h, module = t.hook, t.module
        if h.unscale_gradients is not None:
            h.unscale_gradients(trainer=t, optimizer=optimizer)
        if h.on_before_optimizer_step is not None:
            h.on_before_optimizer_step(trainer=t, module=module, optimizer=optimizer)
        clip_val = t.config.gradient_clip_val
        if clip and clip_val:
            h.clip_gradients(trainer=t, module=module, optimizer=optimizer, clip_val=clip_val,
                             algorithm=t.config.gradient_clip_algorithm or "norm")
        h.optimizer_step(trainer=t, module=module, optimizer=optimizer)
        self.progress.global_step += 1

    def step_schedulers(self, interval: str) -> None:
        t = self.t
        counter = self.progress.global_step if interval == "step" else self.progress.current_epoch + 1
        for config in t.lr_scheduler_configs:
            if config.interval != interval or counter % config.frequency:
                continue
            if config.reduce_on_plateau:
                if interval == "step":
                    self._plateau(config)
                continue
            config.scheduler.step()

    def step_plateau(self, interval: str) -> None:
        t = self.t
        for config in t.lr_scheduler_configs:
            if config.reduce_on_plateau and config.interval == interval and (self.progress.current_epoch + 1) % config.frequency == 0:
                self._plateau(config)

    def _plateau(self, config: Any) -> None:
        value = self.t.callback_metrics.get(config.monitor)
        if value is None:
            if config.strict:
                raise ConfigurationError(
                    f"the ReduceLROnPlateau scheduler monitors {config.monitor!r}, which was not logged. "
                    f"Logged metrics: {sorted(self.t.callback_metrics) or '(none)'}. Log it with self.log, or set "
                    "'strict': False in the lr_scheduler dict to skip the step instead.")
            return
        config.scheduler.step(float(value))

    def should_validate(self, batch_idx: int, is_last: bool) -> bool:
        t, cfg = self.t, self.t.config
        if not self.val_loaders or not any(t.num_val_batches):
            return False
        every_epoch = cfg.check_val_every_n_epoch
        vci = None if cfg.fast_dev_run else cfg.val_check_interval
        if every_epoch is None:  # int val_check_interval counted across epochs (checked by TrainerConfig)
            assert isinstance(vci, int)
            return self.progress.batches_seen % vci == 0
        if (self.progress.current_epoch + 1) % every_epoch:
            return False
        if vci is None or (isinstance(vci, float) and vci == 1.0):
            return is_last
        every = vci if isinstance(vci, int) else max(1, int(t.num_training_batches * vci))
        return (batch_idx + 1) % every == 0

    def _epoch_end_validation_due(self) -> bool:
        """Validation at the end of an epoch that ended early (``-1``, ``max_steps``, ``should_stop``)."""
        t, cfg = self.t, self.t.config
        if not self.val_loaders or not any(t.num_val_batches) or cfg.check_val_every_n_epoch is None:
            return False
        vci = None if cfg.fast_dev_run else cfg.val_check_interval
        ended_early = self.max_steps != -1 and self.progress.global_step >= self.max_steps
        return ended_early and vci in (None, 1.0) and (self.progress.current_epoch + 1) % cfg.check_val_every_n_epoch == 0

    def run_validation(self) -> None:
        t = self.t
        saved = self.log_context.saved()
        self.evaluate("validate", self.val_loaders, t.num_val_batches)
        if t.hook.log_metrics is not None:
            self.metrics.write_epoch(self.val_results)
        self.log_context.restore(saved)
        t.state.stage = "train"

    # -- validate / test -----------------------------------------------------------------------------------
    def evaluate_entry(self, stage: str, given: Any, verbose: bool) -> list[dict[str, float]]:
        t = self.t
        loaders = self.loaders(stage, given)
        if not loaders:
            raise ConfigurationError(f"trainer.{stage}() found no data: pass dataloaders=..., define "
                                     f"{_LOADER_METHODS[stage]}() on the module, or pass a datamodule.")
        nums = [self.num_batches(stage, dl) for dl in loaders]
        if stage == "validate":
            t.num_val_batches = nums
        else:
            t.num_test_batches = nums
        metrics = self.evaluate(stage, loaders, nums)
        results = self.val_results if stage == "validate" else self.test_results
        if t.hook.log_metrics is not None:
            self.metrics.write_epoch(results)
        if verbose and t.is_global_zero and any(metrics):
            for i, m in enumerate(metrics):
                title = f"{stage} metrics" + (f" (dataloader {i})" if len(metrics) > 1 else "")
                print(title + ": " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(m.items())))
        return metrics

    def evaluate(self, stage: str, loaders: list[Any], nums: list[float]) -> list[dict[str, float]]:
        t = self.t
        h, module, fn = t.hook, t.module, t.state.fn
        name = _HOOK_STAGE[stage]
        hooks = {k: getattr(h, f"on_{name}_{k}", None) for k in
                 ("start", "end", "epoch_start", "epoch_end", "batch_start", "batch_end")}
        eval_hook = getattr(h, f"on_{name}_model_eval")
        results = Results(stage)
        if stage == "validate":
            self.val_results = results
        else:
            self.test_results = results
        t.state.stage = stage
        self.log_context.enter(results, len(loaders), _EPOCH_HOOK_CTX)
        model = t.model
        was_training = model.training
        model.eval()
        kw = {"trainer": t, "module": module}
        if eval_hook is not None:
            eval_hook(**kw)
        with _grad_context(t.config.inference_mode):
            self.log_context.defaults = _EPOCH_HOOK_CTX
            if hooks["start"] is not None:
                hooks["start"](**kw)
            if hooks["epoch_start"] is not None:
                hooks["epoch_start"](**kw)
            for dl_idx, (loader, n) in enumerate(zip(loaders, nums)):
                if n == 0:
                    continue
                self.log_context.dataloader_idx = dl_idx
                limited = n < _length(loader)  # else the loader ends by itself, as in a for-loop
                for batch_idx, batch in enumerate(loader):
                    self.log_context.defaults = _EVAL_STEP_CTX
                    batch = self.transfer(batch, dl_idx)
                    if hooks["batch_start"] is not None:
                        hooks["batch_start"](batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx, **kw)
                    out = h.step(trainer=t, model=model, module=module, batch=batch, batch_idx=batch_idx,
                                 dataloader_idx=dl_idx, stage=stage)
                    if hooks["batch_end"] is not None:
                        hooks["batch_end"](outputs=out, batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx,
                                           **kw)
                    if limited and batch_idx + 1 >= n:
                        break
            self.log_context.batch = None
            self.log_context.defaults = _EPOCH_HOOK_CTX
            if hooks["epoch_end"] is not None:
                hooks["epoch_end"](**kw)
            values = self.metrics.publish_epoch(results)
            if hooks["end"] is not None:
                hooks["end"](**kw)
        if was_training:
            model.train()
        if stage == "validate" and fn == "fit" and h.on_validation_model_train is not None:
            h.on_validation_model_train(**kw)
        per_loader = []
        for i in range(len(loaders)):
            suffix = f"/dataloader_idx_{i}"
            per_loader.append({k: float(v) for k, v in values.items()
                               if "/dataloader_idx_" not in k or k.endswith(suffix)})
        return per_loader

    # -- predict -------------------------------------------------------------------------------------------
    def predict(self, given: Any, return_predictions: bool) -> Any:
        t = self.t
        h, module = t.hook, t.module
        loaders = self.loaders("predict", given)
        if not loaders:
            raise ConfigurationError("trainer.predict() found no data: pass dataloaders=..., define "
                                     "predict_dataloader() on the module, or pass a datamodule.")
        nums = [self.num_batches("predict", dl) for dl in loaders]
        t.num_predict_batches = nums
        t.state.stage = "predict"
        self.log_context.num_dataloaders = len(loaders)
        t.model.eval()
        kw = {"trainer": t, "module": module}
        if h.on_predict_model_eval is not None:
            h.on_predict_model_eval(**kw)
        predictions: list[list[Any]] = [[] for _ in loaders]
        with _grad_context(t.config.inference_mode):
            if h.on_predict_start is not None:
                h.on_predict_start(**kw)
            if h.on_predict_epoch_start is not None:
                h.on_predict_epoch_start(**kw)
            for dl_idx, (loader, n) in enumerate(zip(loaders, nums)):
                if n == 0:
                    continue
                self.log_context.dataloader_idx = dl_idx
                limited = n < _length(loader)  # else the loader ends by itself, as in a for-loop
                for batch_idx, batch in enumerate(loader):
                    batch = self.transfer(batch, dl_idx)
                    if h.on_predict_batch_start is not None:
                        h.on_predict_batch_start(batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx, **kw)
                    out = h.step(trainer=t, model=t.model, module=module, batch=batch, batch_idx=batch_idx,
                                 dataloader_idx=dl_idx, stage="predict")
                    if return_predictions:
                        predictions[dl_idx].append(out)
                    if h.on_predict_batch_end is not None:
                        h.on_predict_batch_end(outputs=out, batch=batch, batch_idx=batch_idx, dataloader_idx=dl_idx,
                                               **kw)
                    if limited and batch_idx + 1 >= n:
                        break
            if h.on_predict_epoch_end is not None:
                h.on_predict_epoch_end(**kw)
            if h.on_predict_end is not None:
                h.on_predict_end(**kw)
        if not return_predictions:
            return None
        return predictions[0] if len(loaders) == 1 else predictions


def _is_loader(obj: Any) -> bool:
    if isinstance(obj, torch.utils.data.DataLoader):
        return True
    return hasattr(obj, "__iter__") and not isinstance(obj, (torch.Tensor, tuple, list, dict, str, bytes))


def _length(loader: Any) -> float:
    try:
        return len(loader)
    except TypeError:
        return math.inf


def _with_last(iterable: Any, start: int = 0) -> Any:
    """Enumerate with a one-batch look-ahead, so the last batch of an unsized loader is known as such."""
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


def _outputs(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return {"loss": out.detach()}
    if isinstance(out, dict) and isinstance(out.get("loss"), torch.Tensor):
        return {**out, "loss": out["loss"].detach()}
    return out


def _grad_context(inference_mode: bool) -> contextlib.AbstractContextManager:
    return torch.inference_mode() if inference_mode else torch.no_grad()
