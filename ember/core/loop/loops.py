"""The loops: what runs for ``fit``, ``validate``, ``test`` and ``predict``, event by event.

The order of events is the contract of design.md section 5 (Lightning 2.x as it runs); docs/architecture.md
walks one batch through it. A fit::

    configure -> distributed_info -> launch -> setup_environment -> root_device -> setup_device
    -> prepare_data -> setup(fit) -> configure_model -> convert_module
    -> [ckpt_path: the module's on_load_checkpoint -> weights -> the other plugins' on_load_checkpoint
        -> (fit) plugin states (callbacks, DataModule)]
    -> configure_optimizers -> setup_module -> [optimizer and scheduler states, loop progress] -> log_hyperparams
    -> on_fit_start -> [sanity check: on_sanity_check_start -> validation -> on_sanity_check_end]
    -> on_train_start -> epochs (:mod:`ember.core.loop.training`), each with its validation
       (:mod:`ember.core.loop.evaluation`) -> on_train_end -> on_fit_end -> teardown(fit)

``validate``/``test``/``predict`` run the same set-up, then one evaluation epoch. The hot path (one training
batch) reads hooks from the per-run :class:`~ember.core.hooks.plugin_manager.HookTable`, where a hook nobody
implements is None and is skipped for the price of an attribute test.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import torch

from ember.core.errors import (
    CheckpointError,
    ConfigurationError,
    PossibleUserWarning,
    warn_user,
)
from ember.core.hooks.positional import defines, same_call
from ember.core.loop import seed
from ember.core.loop.combined import Together
from ember.core.loop.data import LIMIT_ARG, LOADER_METHODS, has_source, num_batches, reported_counts, stage_loaders
from ember.core.loop.evaluation import EvaluationLoop, by_dataloader
from ember.core.loop.loop_views import LoopViews
from ember.core.loop.metrics import MetricLog
from ember.core.loop.optim import check_optimization, parse_optimizers
from ember.core.loop.results import Results
from ember.core.loop.seed import preserved_rng
from ember.core.loop.state import EPOCH_HOOK, IDLE, FitProgress, Launched, LogContext, Progress, StateName
from ember.core.loop.training import ManualOptimizer, TrainingLoop

if TYPE_CHECKING:
    from ember.core.loop.parts import RunningTrainer


class Loops:
    """Runs one ``fit``/``validate``/``test``/``predict`` for its trainer, and owns the run state."""

    def __init__(self, trainer: RunningTrainer) -> None:
        self.t = trainer
        self.max_epochs = -1
        self.max_steps = -1
        #: A fit has set the limits it runs under (before, ``trainer.max_epochs`` is the argument as given).
        self.limits_set = False
        if getattr(trainer, "config", None) is not None:
            self.max_steps, self.max_epochs = self.limits()  # read right after the Trainer is built, as in Lightning
        #: The run state this loop owns; the Trainer's properties read it.
        self.progress = Progress()
        self.log_context = LogContext()
        self.metrics = MetricLog(trainer, self.log_context, self.progress)
        self.train_results = Results("train")
        self.val_results = Results("validate")
        self.test_results = Results("test")
        self.training = TrainingLoop(self)
        self.evaluation = EvaluationLoop(self)
        self.metrics.eval_counts = self.evaluation.counts
        #: Lightning's loop objects over this state (``trainer.fit_loop``, ...).
        self.views = LoopViews(self)
        #: What ``self.optimizers()`` returns under manual optimization.
        self.manual_optimizers: list[ManualOptimizer] = []
        #: The loaders given to the running fit (None where its data comes from methods).
        self.fit_loaders: dict[str, Any] = {}
        #: The loaders of the last validate/test/predict run, by stage.
        self.eval_loaders: dict[str, list[Any]] = {}
        #: Loaders attached outside a run, by stage (Lightning's data connector), for the loop views' setup_data.
        self.attached: dict[str, Any] = {}

    # -- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self, batch_idx: int | None = None) -> dict[str, Any]:
        """The loop's part of a full checkpoint, as one unit: the progress counters (``loops["fit"]``, written
        after batch ``batch_idx`` of the epoch, or before its first batch), the epoch accumulators of
        ``self.log`` (``results["train"]``) and ``callback_metrics``."""
        progress = self.progress.snapshot(batch_idx)
        stopped_after = self.training.stopped_after
        if batch_idx is None and stopped_after is not None and self.training.marks.phase == IDLE:
            # max_steps ended the last epoch before its last batch: see load_state_dict
            progress = attrs.evolve(self.progress.snapshot(stopped_after), epoch=progress.epoch - 1, phase="epoch_end")
        return {"loops": {"fit": attrs.asdict(progress)},
                "results": {"train": self.train_results.state_dict()},
                "callback_metrics": {k: v.detach() for k, v in self.metrics.callback_metrics.items()
                                     if isinstance(v, torch.Tensor)}}

    def load_state_dict(self, checkpoint: Mapping[str, Any], path: str | None) -> FitProgress:
        """Continue from what :meth:`state_dict` wrote into ``checkpoint`` (read from ``path``)."""
        loops = checkpoint.get("loops")
        if not isinstance(loops, Mapping) or not isinstance(loops.get("fit"), Mapping):
            raise CheckpointError(f"{path} has no loop progress (loops['fit']): it cannot resume a fit.")
        progress = FitProgress.from_dict(loops["fit"])
        if progress.phase == "epoch_end":  # an epoch that max_steps ended early: as in Lightning, a fit bounded by
            # max_steps goes on inside it, after its last batch run (as the fit would have with a higher max_steps);
            # one bounded by epochs counts it as finished
            progress = attrs.evolve(progress, phase="batch") if self.max_steps != -1 else \
                attrs.evolve(progress, epoch=progress.epoch + 1, phase="epoch_start", batch_idx=-1)
        self.progress.restore(progress)
        self.train_results.load_state_dict(checkpoint.get("results", {}).get("train", {}))
        self.metrics.callback_metrics.update(checkpoint.get("callback_metrics", {}))
        return progress

    # -- one run -------------------------------------------------------------------------------------------
    def run(self, fn: str, loaders: dict[str, Any], options: dict[str, Any]) -> Any:
        """Set up the processes, the device and the module, then run ``fn``; afterwards (``teardown``,
        ``on_exception``, the next run's ``configure_callbacks``) ``self.log`` is refused until a stage begins."""
        self.log_context.leave()  # nothing from before the run (a stage set by hand in a unit test)
        try:
            return self._run(fn, loaders, options)
        finally:
            self.log_context.leave()

    def _run(self, fn: str, loaders: dict[str, Any], options: dict[str, Any]) -> Any:
        #: What the running entry point was called with (a spawning strategy runs it again in its processes).
        self.request = {"fn": fn, "loaders": loaders, "options": options}
        launched = self._setup_processes(fn)
        if launched is not None:  # the processes the strategy started ran it; their results are here now
            return launched.result
        if fn == "fit":  # on each process, once it knows its rank (only global rank 0 warns)
            self._set_limits()
        self._setup_module(fn)
        t = self.t
        t.ckpt_path = None
        self.metrics.reset()
        if options.get("ckpt_path"):  # weights and plugin states now; a fit restores the rest once its optimizers exist
            t.checkpointing.restore(options["ckpt_path"], options.get("weights_only", True))
        if fn == "fit":
            with t.checkpointing.fitting(), torch.autograd.set_detect_anomaly(t.config.detect_anomaly):
                return self.fit(loaders)
        self.log_hyperparameters()  # at each entry point, as in Lightning
        t.module.zero_grad()  # as Lightning does before each stage (a fit's: after on_fit_start)
        if not t.config.fast_dev_batches and getattr(t.config, LIMIT_ARG[fn]) == 0:
            # limit_<stage>_batches=0 turns the stage off, as in Lightning: no loader asked for, no hook, no counts
            setattr(t, f"num_{'val' if fn == 'validate' else fn}_batches", [])
            return None if fn == "predict" else []
        if fn == "predict":
            keep = options.get("return_predictions")
            return self.predict(loaders["predict"], True if keep is None else keep)  # None: Lightning's default
        return self.evaluate(fn, loaders[fn], options.get("verbose", True))

    def _set_limits(self) -> None:
        self.max_steps, self.max_epochs = self.limits()
        self.limits_set = True
        cfg = self.t.config
        if cfg.max_epochs is None and self.max_epochs == 1000 and self.t.is_global_zero:
            warn_user("Trainer(max_epochs=None) and no max_steps: `max_epochs` was not set. Setting it to 1000 "
                      "epochs. Pass max_epochs=-1 to train without an epoch limit (until max_steps, a time limit or "
                      "trainer.should_stop ends the fit), or a number of epochs; either silences this warning.",
                      PossibleUserWarning)

    def limits(self) -> tuple[int, int]:
        """``(max_steps, max_epochs)`` a fit with this configuration runs under (-1: no limit), as Lightning
        sets them: without ``max_epochs``, 1000 epochs unless ``max_steps`` is given."""
        cfg = self.t.config
        fdr = cfg.fast_dev_batches
        if fdr:
            return fdr, 1
        if cfg.max_epochs is None:
            return cfg.max_steps, 1000 if cfg.max_steps == -1 else -1
        return cfg.max_steps, cfg.max_epochs

    def _setup_processes(self, fn: str) -> Launched | None:
        """configure -> distributed_info -> launch -> setup_environment -> root_device -> setup_device ->
        prepare_data (local rank 0) -> barrier. Returns the answer of ``launch`` when it ran the job elsewhere
        and brought the results back (a spawning strategy)."""
        t, cfg = self.t, self.t.config
        h = t.hook
        if h.configure is not None:
            h.configure(trainer=t)
        info = h.distributed_info(trainer=t)
        t.global_rank, t.local_rank = info["global_rank"], info["local_rank"]
        t.node_rank, t.world_size = info.get("node_rank", 0), info["world_size"]
        if h.launch is not None:
            status = h.launch(trainer=t, fn=fn)
            if isinstance(status, Launched):
                return status
            if status is not None:  # the job ran in the processes the strategy started; this one is done
                t.state.status = "launched"
                raise SystemExit(status)
        if h.setup_environment is not None:
            h.setup_environment(trainer=t)
        if cfg.deterministic:
            seed.use_deterministic(t, cfg.deterministic)  # put back when the run ends
        if cfg.benchmark is not None:
            torch.backends.cudnn.benchmark = cfg.benchmark
        t.root_device = h.root_device(trainer=t)
        if h.setup_device is not None:
            h.setup_device(trainer=t, device=t.root_device)
        if h.prepare_data is not None and t.local_rank == 0:  # on every node, or the first where asked
            if t.node_rank == 0:
                h.prepare_data(trainer=t)
            else:
                h.call_each("prepare_data", _per_node_only, trainer=t)
        if t.world_size > 1:
            h.barrier(trainer=t, name="prepare_data")
        return None

    def _setup_module(self, fn: str) -> None:
        """setup(fn) -> configure_model (in the strategy's sharded context) -> to the device -> convert_module."""
        t = self.t
        h, module = t.hook, t.module
        if h.setup is not None:
            h.setup(trainer=t, module=module, stage=StateName(fn))
        t.state.setup_done = True
        if h.configure_model is not None:
            with h.model_sharded_context(trainer=t):
                h.configure_model(trainer=t, module=module)
        if t.config.sync_batchnorm and t.world_size > 1:
            module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        module.to(t.root_device)
        converted = h.convert_module(trainer=t, module=module) if h.convert_module is not None else None
        if converted is not None and converted is not module:
            t.module = module = converted
        t.model = module

    def transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """on_before_batch_transfer -> batch_to_device -> on_after_batch_transfer -> convert_input."""
        t = self.t
        h = t.hook
        if h.on_before_batch_transfer is not None:  # no self.log inside (Lightning): refused only when implemented
            new = self.log_context.call_refusing("on_before_batch_transfer", h.on_before_batch_transfer, trainer=t,
                                                 module=t.module, batch=batch, dataloader_idx=dataloader_idx)
            batch = batch if new is None else new
        batch = h.batch_to_device(trainer=t, batch=batch, device=t.root_device, dataloader_idx=dataloader_idx)
        if h.on_after_batch_transfer is not None:
            new = self.log_context.call_refusing("on_after_batch_transfer", h.on_after_batch_transfer, trainer=t,
                                                 module=t.module, batch=batch, dataloader_idx=dataloader_idx)
            batch = batch if new is None else new
        if h.convert_input is not None:
            new = h.convert_input(trainer=t, data=batch)
            batch = batch if new is None else new
        self.log_context.batch = batch
        return batch

    # -- fit -----------------------------------------------------------------------------------------------
    def fit(self, loaders: dict[str, Any]) -> None:
        """The fit's events, in order."""
        t = self.t
        h, module, ckpt = t.hook, t.module, t.checkpointing
        resume = self._prepare_fit(loaders)
        self.log_hyperparameters()
        if h.on_fit_start is not None:
            h.on_fit_start(trainer=t, module=module)
        # (resumed in the middle of an accumulation window: the gradients the checkpoint held stay)
        if resume is None or resume.phase != "batch" or all(p.grad is None for p in module.parameters()):
            module.zero_grad()
        if t.is_global_zero:  # the modes the user left, before the sanity check (which puts them back as found)
            _warn_eval_modules(module)
        self.sanity_check()
        t.state.stage = "train"
        if self.training.train_loader is None:  # else asked for already (estimated_stepping_batches)
            self.load_train_data()
        self.training.load_val_data_before_training()
        if h.on_train_start is not None:
            self._log_into_first_epoch(resume)
            h.on_train_start(trainer=t, module=module)
        self.training.start_fit()
        if resume is not None and resume.phase == "batch":
            self.training.run_epoch(resume)
        elif resume is not None:
            ckpt.restore_rng()
        while True:
            if ckpt.safe_point_due:  # between epochs: write requested checkpoints, stop on a signal
                ckpt.safe_point()
            if self.training.done():
                break
            self.training.run_epoch()
        ckpt.end_training()
        t.state.stage = "train"
        ctx = self.log_context  # no self.log from here on (Lightning): the epochs' values are written already
        if h.on_train_end is not None:
            ctx.call_refusing("on_train_end", h.on_train_end, trainer=t, module=module)
        if h.on_fit_end is not None:
            ctx.call_refusing("on_fit_end", h.on_fit_end, trainer=t, module=module)

    def _log_into_first_epoch(self, resume: Any) -> None:
        """What ``on_train_start`` logs is a value of the first epoch (Lightning's rule): it lands in the training
        results, which that epoch then keeps instead of starting empty."""
        if resume is None or resume.phase != "batch":  # resuming mid-epoch: the restored results go on
            self.train_results.reset()
        self.log_context.enter(self.train_results, 1, EPOCH_HOOK)
        self.training.keep_results = True

    def _prepare_fit(self, loaders: dict[str, Any]) -> Any:
        """The fit's optimizers and, when resuming, the restored state; returns where it resumes. The loaders are
        asked for later, as in Lightning: the training one when training starts (or when
        ``estimated_stepping_batches`` needs its length), the validation ones when validation first runs."""
        t = self.t
        if not has_source(t, "train", loaders["train"]):
            raise ConfigurationError("trainer.fit() found no training data: pass train_dataloaders=..., define "
                                     "train_dataloader() on the module, or pass a datamodule.")
        self.fit_loaders = loaders
        validates = has_source(t, "validate", loaders["validate"])
        if validates and not defines(t.module, "validation_step"):
            warnings.warn("trainer.fit() got validation data, but the module has no validation_step: the "
                          "validation loop is skipped. Define validation_step, or pass no validation data.",
                          UserWarning, stacklevel=5)
            validates = False
        self.training.reset_data(validates and (t.config.limit_val_batches != 0 or bool(t.config.fast_dev_batches)))
        t.num_training_batches, t.num_val_batches = math.inf, []
        self.setup_optimizers()
        return t.checkpointing.restore_training()

    def load_train_data(self) -> None:
        """The fit's training loader and its batch count; called again every ``reload_dataloaders_every_n_epochs``
        epochs (loaders given to ``fit`` are the same objects again, ``train_dataloader()`` is called again)."""
        t = self.t
        train = stage_loaders(t, "train", self.fit_loaders["train"])
        if not train:
            raise ConfigurationError("trainer.fit() found no training data: train_dataloader() returned None.")
        if len(train) > 1:  # loaders to run one after another: CombinedLoader(mode="sequential")
            t.num_training_batches = sum(num_batches(t.config, "train", dl) for dl in train)
            raise ConfigurationError(
                "trainer.fit() got training loaders to run one after another (CombinedLoader(mode='sequential')), "
                "but a training step takes one batch: ember's training loop, like Lightning's `FitLoop` does not "
                "support the 'sequential' mode. Pass the loaders as a list or dict (their batches together each "
                "step), or a CombinedLoader in mode 'max_size_cycle', 'max_size' or 'min_size'.")
        training = self.training
        # what trainer.train_dataloader gives: the collection of loaders where several are iterated together
        training.given_train_loader = train[0].iterables if isinstance(train[0], Together) else train[0]
        training.train_loader = t.checkpointing.train_loader(train[0])
        training.train_loaded_epoch = self.progress.current_epoch
        t.num_training_batches = num_batches(t.config, "train", training.train_loader)
        if t.num_training_batches == 0 and t.config.limit_train_batches != 0:
            raise ConfigurationError(
                "trainer.fit() got an empty training loader (0 batches): its dataset is empty, or smaller than "
                "one batch with drop_last=True. Check the data; pass limit_train_batches=0 to skip training on "
                "purpose.")
        every, n = t.config.log_every_n_steps, t.num_training_batches
        if t.loggers and every and n < every and not t.config.fast_dev_batches and t.is_global_zero:
            warn_user(f"The number of training batches ({n:g}) is smaller than the logging interval "
                      f"Trainer(log_every_n_steps={every}): the training metrics are logged every {every} optimizer "
                      "steps counted over the whole fit, so not within each epoch. Set a lower log_every_n_steps to "
                      "see them for every epoch.", PossibleUserWarning)
        self._check_val_interval()

    def load_val_data(self) -> None:
        """The fit's validation loaders and their batch counts (see ``TrainingLoop.load_val_data_if_due``)."""
        t, training = self.t, self.training
        training.val_loaders = stage_loaders(t, "validate", self.fit_loaders["validate"])
        training.val_nums = [num_batches(t.config, "validate", dl) for dl in training.val_loaders]
        t.num_val_batches = reported_counts(t.config, "validate", training.val_loaders, training.val_nums)

    def sanity_check(self) -> None:
        """on_sanity_check_start -> the validation loaders -> a few validation batches -> on_sanity_check_end,
        leaving the random state as it found it: training then draws the same numbers as a run without it (and as
        the plain loop)."""
        t, cfg = self.t, self.t.config
        steps = 0 if cfg.fast_dev_run else cfg.num_sanity_val_steps
        if not self.training.validates or steps == 0:
            return
        h = t.hook
        t.state.sanity_checking = True
        t.state.stage = "sanity_check"
        try:
            with preserved_rng(t.root_device), self.metrics.scratch():
                if h.on_sanity_check_start is not None:
                    self.log_context.call_refusing("on_sanity_check_start", h.on_sanity_check_start, trainer=t,
                                                   module=t.module)
                self.training.load_val_data_if_due()
                if self.training.val_loaders and any(self.training.val_nums):
                    t.num_sanity_val_batches = [n if steps == -1 else min(n, steps) for n in self.training.val_nums]
                    self.evaluation.run("validate", self.training.val_loaders, t.num_sanity_val_batches)
                if h.on_sanity_check_end is not None:
                    self.log_context.call_refusing("on_sanity_check_end", h.on_sanity_check_end, trainer=t,
                                                   module=t.module)
        finally:
            t.state.sanity_checking = False
            self.evaluation.counts["fit"].clear()  # the fit's validation counts start after the sanity check

    def log_hyperparameters(self) -> None:
        """Hand the hyperparameters to the loggers (``log_hyperparams``), on global rank 0."""
        t = self.t
        if t.hook.log_hyperparams is not None and t.is_global_zero and t.config.enable_autolog_hparams:
            saved = any(getattr(source, "_log_hyperparams", None) is True for source in (t.module, t.datamodule))
            t.hook.log_hyperparams(trainer=t, params=self.hyperparameters(), saved=saved)

    def hyperparameters(self) -> dict[str, Any]:
        """The module's ``hparams`` and the DataModule's, for the loggers."""
        params: dict[str, Any] = {}
        for source in (self.t.module, self.t.datamodule):
            # as saved (hparams_initial), not as changed since; save_hyperparameters(logger=False): not logged
            hparams = getattr(source, "hparams_initial", getattr(source, "hparams", None)) \
                if source is not None else None
            if isinstance(hparams, dict) and getattr(source, "_log_hyperparams", True):
                clash = sorted(k for k, v in hparams.items() if k in params and not _same_value(params[k], v))
                if clash:
                    raise RuntimeError(f"Error while merging hparams: the module and the DataModule both save "
                                       f"{clash}, with different values; rename one of them.")
                params.update(hparams)
        return params

    def setup_optimizers(self) -> None:
        t = self.t
        module = t.module
        optimizers, schedulers = parse_optimizers(module.configure_optimizers(),
                                                  getattr(module, "automatic_optimization", True))
        check_optimization(module, t.config, optimizers, schedulers)
        t.optimizers = optimizers
        t.lr_scheduler_configs = schedulers
        model = t.hook.setup_module(trainer=t, module=module)
        t.model = module if model is None else model
        self.manual_optimizers = [ManualOptimizer(o, self.training) for o in optimizers]

    def _check_val_interval(self) -> None:
        vci = self.t.config.val_check_interval
        if self.t.config.fast_dev_run:  # validates once at the epoch's end, whatever val_check_interval says
            return
        if isinstance(vci, float) and vci < 1.0 and self.t.num_training_batches == math.inf:
            raise ConfigurationError(f"Trainer(val_check_interval={vci}) is a fraction of an epoch, but the "
                                     "training data has no length; pass an int (every N batches).")
        if isinstance(vci, int) and self.t.config.check_val_every_n_epoch is not None \
                and vci > self.t.num_training_batches and self.t.config.limit_val_batches != 0:  # 0: no validation
            raise ConfigurationError(
                f"Trainer(val_check_interval={vci}) must be less than or equal to the number of the training batches "
                f"of an epoch ({self.t.num_training_batches}); lower it, or pass check_val_every_n_epoch=None to "
                "count batches across epochs.")

    # -- validate / test / predict -------------------------------------------------------------------------
    def _eval_data(self, stage: str, given: Any) -> tuple[list[Any], list[float]]:
        loaders = stage_loaders(self.t, stage, given)
        self.eval_loaders[stage] = loaders
        if not loaders:
            raise ConfigurationError(f"trainer.{stage}() found no data: pass dataloaders=..., define "
                                     f"{LOADER_METHODS[stage]}() on the module, or pass a datamodule.")
        return loaders, [num_batches(self.t.config, stage, dl) for dl in loaders]

    def evaluate(self, stage: str, given: Any, verbose: bool) -> list[dict[str, float]]:
        """``trainer.validate``/``trainer.test``: one evaluation epoch; returns each loader's epoch metrics."""
        t = self.t
        loaders, nums = self._eval_data(stage, given)
        if stage == "validate":
            t.num_val_batches = reported_counts(t.config, stage, loaders, nums)
        else:
            t.num_test_batches = reported_counts(t.config, stage, loaders, nums)
        values = self.evaluation.run(stage, loaders, nums)
        results = self.val_results if stage == "validate" else self.test_results  # the run's, made by run()
        metrics = by_dataloader(results, values, len(loaders))  # the loggers have them already (evaluation.run)
        if verbose and t.is_global_zero and any(metrics):
            for i, m in enumerate(metrics):
                title = f"{stage} metrics" + (f" (dataloader {i})" if len(metrics) > 1 else "")
                print(title + ": " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(m.items())))
        return metrics

    def predict(self, given: Any, return_predictions: bool) -> Any:
        """``trainer.predict``: the outputs of ``predict_step`` (a list per loader when several)."""
        loaders, nums = self._eval_data("predict", given)
        self.t.num_predict_batches = reported_counts(self.t.config, "predict", loaders, nums)
        predictions: list[list[Any]] = [[] for _ in loaders]
        self.evaluation.run("predict", loaders, nums, predictions if return_predictions else None)
        if not return_predictions:
            return None
        return predictions[0] if len(loaders) == 1 else predictions


def _per_node_only(impl: Any) -> Any:
    """``impl`` of ``prepare_data``, skipped where its plugin asks to prepare on the first node only
    (``prepare_data_per_node = False``, as LightningModule and LightningDataModule take it)."""
    if impl.wrapper or impl.hookwrapper or getattr(impl.plugin, "prepare_data_per_node", True) is not False:
        return impl
    return same_call(impl, _nothing)


def _nothing(*args: Any) -> None:
    return None


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a tensor of several values, ...: compared by identity
        return a is b


def _warn_eval_modules(module: Any) -> None:
    """Once per fit: submodules the user left in eval mode stay so during training (a fit does not call
    ``module.train()``, as Lightning's does not); say so, since it is more often an oversight than a choice."""
    names = [name or type(module).__name__ for name, m in module.named_modules() if not m.training] \
        if isinstance(module, torch.nn.Module) else []
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        warn_user(f"Found {len(names)} module(s) in eval mode at the start of training ({shown}). They stay in eval "
                  "mode while training (dropout off, batch-norm statistics frozen). If that is not intended, call "
                  "module.train() before trainer.fit(); if it is, ignore this warning.", PossibleUserWarning)

