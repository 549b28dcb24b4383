"""``ember.Module``: an optional base class with Lightning's conveniences.

Any ``torch.nn.Module`` with ``training_step`` and ``configure_optimizers`` trains; this base adds
``self.log``, ``self.trainer``, ``self.device``, ``save_hyperparameters``, ``manual_backward``,
``optimizers()`` and friends, with LightningModule's names. Every hook is present as a no-op (so an override
may call ``super()``), and so are the methods Lightning lets a module override (``optimizer_step``,
``backward``, ``transfer_batch_to_device``, ...), with Lightning's default behaviour. The no-ops are marked
and never registered: a hook nobody overrides still costs nothing per step. Hooks take their arguments by
position, as LightningModule's do (:mod:`ember.core.hooks.positional`); the overrides are honoured by
:mod:`ember.core.loop.module_overrides`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ember.core.api.datamodule import LoaderPlaceholders
from ember.core.api.hparams import AttributeDict, HyperparametersMixin
from ember.core.errors import warn_user
from ember.core.hooks.plugin_manager import EVENT_HOOKS, NOT_CALLED
from ember.core.hooks.positional import STYLE_ATTR, add_base_hooks, base_hook

if TYPE_CHECKING:
    from ember.core.loop.parts import RunningTrainer


class StepPlaceholders(LoaderPlaceholders):
    """What the Trainer looks for on a module, as placeholders until a class defines them (as on LightningModule, so
    that code wrapping the class's methods finds them; a placeholder counts as absent:
    :func:`ember.core.hooks.positional.defines`). The last base of :class:`Module`, so that a mixin after it
    (``class M(ember.Module, MyNet)``) still gives its own ``training_step`` or ``configure_optimizers``; the
    data methods are :class:`~ember.core.api.datamodule.LoaderPlaceholders`."""

    @base_hook
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """One training batch: return the loss (a tensor, a dict with ``"loss"``, or None to skip the batch).
        Required by ``trainer.fit``."""
        warn_user(f"{type(self).__name__}.training_step() is not defined: define it to train the module.")

    @base_hook
    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """One validation batch (log with ``self.log``). Without it a fit does not validate."""

    @base_hook
    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """One test batch (log with ``self.log``). Required by ``trainer.test``."""

    @base_hook
    def configure_optimizers(self) -> Any:
        """The optimizers (and schedulers) of a fit: every return shape Lightning accepts. Required by
        ``trainer.fit``."""
        warn_user(f"{type(self).__name__}.configure_optimizers() is not defined: define it to train the module.")


class Module(HyperparametersMixin, torch.nn.Module, StepPlaceholders):
    """Optional base class for models trained by ``ember.Trainer``."""

    #: Set to False to step optimizers yourself in ``training_step`` (``manual_backward``, ``optimizers()``).
    automatic_optimization: bool = True
    #: False: checkpoints load into this module with ``strict=False`` (resume, and ``load_from_checkpoint``
    #: without ``strict``), as LightningModule's ``strict_loading``.
    strict_loading: bool = True
    #: An example input (Lightning's name): used by ``to_onnx``/``to_torchscript``/``export`` when no sample is
    #: given. None until set.
    example_input_array: Any = None
    #: False: ``prepare_data`` runs on the first node only (on local rank 0 of every node by default).
    prepare_data_per_node: bool = True
    #: Properties TorchScript leaves out when it scripts the module (they are about training).
    __jit_unused_properties__: list[str] = ["trainer", "device", "dtype", "current_epoch", "global_step",
                                            "global_rank", "local_rank", "hparams", "hparams_initial", "logger",
                                            "loggers", "on_gpu"]
    #: Attributes TorchScript must not type (``Any`` has no TorchScript type).
    __jit_ignored_attributes__: list[str] = ["example_input_array"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: RunningTrainer | None = None
        self._hparams = AttributeDict()

    # -- the trainer and where we are --------------------------------------------------------------------
    @property
    def trainer(self) -> RunningTrainer:
        trainer = self.__dict__.get("_trainer")
        if trainer is None and not self.__dict__.get("_jit_is_scripting"):  # TorchScript inspects every property
            raise RuntimeError(f"{type(self).__name__} is not attached to a `Trainer`: call trainer.fit(...) first.")
        return trainer  # type: ignore[return-value]  # None only while TorchScript inspects the class

    @trainer.setter
    def trainer(self, trainer: RunningTrainer | None) -> None:
        """Attach this module, and every ember module inside it, to ``trainer`` (None detaches them): what the
        Trainer does when a run starts, for code that calls a module's hooks by hand."""
        for module in self.modules():
            if isinstance(module, Module):
                module.__dict__["_trainer"] = trainer

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        trainer = self.__dict__.get("_trainer")
        return trainer.root_device if trainer is not None else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        for p in self.parameters():
            return p.dtype
        return torch.get_default_dtype()

    @property
    def current_epoch(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.current_epoch if trainer is not None else 0

    @property
    def global_step(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.global_step if trainer is not None else 0

    @property
    def global_rank(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.global_rank if trainer is not None else 0

    @property
    def local_rank(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.local_rank if trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger, or None."""
        trainer = self.__dict__.get("_trainer")
        return trainer.logger if trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers."""
        trainer = self.__dict__.get("_trainer")
        return trainer.loggers if trainer is not None else []

    @property
    def on_gpu(self) -> bool:
        """True when the module's parameters are on a CUDA device."""
        return self.device.type == "cuda"

    def freeze(self) -> Module:
        """No parameter requires gradients, and eval mode."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Module:
        """Every parameter requires gradients, and train mode."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    # -- logging -----------------------------------------------------------------------------------------
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
            enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
            add_dataloader_idx: bool = True, batch_size: int | None = None, metric_attribute: str | None = None,
            rank_zero_only: bool = False) -> None:
        """Record a metric; see the logging guide. Defaults follow Lightning: per step in training hooks,
        per epoch (mean over batches, weighted by batch size) in validation/test and epoch hooks.
        ``add_dataloader_idx=False`` keeps ``name`` as it is when there are several dataloaders (make it unique
        yourself). ``enable_graph``, ``sync_dist_group`` and ``rank_zero_only`` are Lightning's and change
        nothing here: values are detached and ``sync_dist`` reduces over every process. A logged torchmetrics
        ``Metric`` must be a submodule of the module unless ``metric_attribute`` names where it is kept.
        ``logger`` (default on) asked for explicitly without a logger warns."""
        trainer: Any = self._trainer  # called every step: the attribute, not the property (which raises when None)
        if trainer is None:  # a step called by hand (a unit test of training_step): nothing to record into
            self._unattached_log(f"log({name!r}, ...)")
            return
        trainer.loop.metrics.log(
            name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch, reduce_fx=reduce_fx,
            sync_dist=sync_dist, batch_size=batch_size, add_dataloader_idx=add_dataloader_idx,
            metric_attribute=metric_attribute)

    def log_dict(self, dictionary: Mapping[str, Any], prog_bar: bool = False, logger: bool | None = None,
                 on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
                 enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
                 add_dataloader_idx: bool = True, batch_size: int | None = None, rank_zero_only: bool = False) -> None:
        """``self.log`` for every item of ``dictionary``."""
        if self._trainer is None:
            self._unattached_log(f"log_dict({list(dictionary)!r}, ...)")
            return
        for name, value in dictionary.items():
            self.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                     reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size,
                     add_dataloader_idx=add_dataloader_idx)

    def _unattached_log(self, call: str) -> None:
        warn_user(f"{type(self).__name__}.{call} did nothing: the `self.trainer` reference is not registered on "
                  "this module, because no Trainer run (fit, validate, test or predict) has it. The value is "
                  "dropped; run the step through a Trainer to record it.")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only; through the progress bar's ``print`` where it has one (Lightning's
        ``TQDMProgressBar`` writes above its bars)."""
        trainer = self.__dict__.get("_trainer")
        if trainer is None or trainer.is_global_zero:
            bar = trainer.progress_bar_callback if trainer is not None else None
            getattr(bar, "print", print)(*args, **kwargs)

    # -- optimization ------------------------------------------------------------------------------------
    def optimizers(self) -> Any:
        """The optimizers from ``configure_optimizers`` (one, or a list), wrapped so that ``step()`` runs the
        precision's and strategy's step and the ``on_before_optimizer_step`` event."""
        opts = self.trainer.loop.manual_optimizers
        return opts[0] if len(opts) == 1 else list(opts)

    def lr_schedulers(self) -> Any:
        """The schedulers from ``configure_optimizers`` (None, one, or a list)."""
        scheds = [c.scheduler for c in self.trainer.lr_scheduler_configs]
        if not scheds:
            return None
        return scheds[0] if len(scheds) == 1 else scheds

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward under manual optimization: runs ``on_before_backward``, the precision's backward (loss
        scaling) and ``on_after_backward``. Use instead of ``loss.backward()``. Further arguments
        (``retain_graph=True``, ...) go to ``Tensor.backward``."""
        self.trainer.loop.training.backward(loss, None, *args, **kwargs)

    def clip_gradients(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> Any:
        """Clip the optimizer's gradients through the precision/strategy: in ``configure_gradient_clipping``, or
        in ``training_step`` under manual optimization. Unset arguments take the Trainer's
        ``gradient_clip_val``/``gradient_clip_algorithm`` (``"norm"``); a value of 0 clips nothing."""
        cfg = self.trainer.config
        if gradient_clip_val is None:
            gradient_clip_val = cfg.gradient_clip_val or 0.0
        elif cfg.gradient_clip_val is not None and cfg.gradient_clip_val != gradient_clip_val:
            from ember.core.errors import ConfigurationError

            raise ConfigurationError(f"You set `Trainer(gradient_clip_val={cfg.gradient_clip_val!r})` and have passed "
                                     f"`clip_gradients(gradient_clip_val={gradient_clip_val!r})`: they disagree, "
                                     "so set only one of them.")
        if gradient_clip_algorithm is not None and cfg.gradient_clip_algorithm is not None and \
                gradient_clip_algorithm.lower() != cfg.gradient_clip_algorithm.lower():
            from ember.core.errors import ConfigurationError

            raise ConfigurationError(f"You set `Trainer(gradient_clip_algorithm={cfg.gradient_clip_algorithm!r})` and "
                                     f"have passed `clip_gradients(gradient_clip_algorithm={gradient_clip_algorithm!r})"
                                     "`: they disagree, so set only one of them.")
        algorithm = (gradient_clip_algorithm or cfg.gradient_clip_algorithm or "norm").lower()
        if not gradient_clip_val:
            return None
        opt = getattr(optimizer, "optimizer", optimizer)
        return self.trainer.loop.training.clip_gradients(opt, gradient_clip_val, algorithm)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Let only ``optimizer``'s parameters require gradients (the others are switched off until
        :meth:`untoggle_optimizer`); for several optimizers under manual optimization."""
        opt = getattr(optimizer, "optimizer", optimizer)
        saved: dict[torch.Tensor, bool] = {}
        for other in self.trainer.optimizers:
            for group in other.param_groups:
                for param in group["params"]:
                    if param not in saved:
                        saved[param] = param.requires_grad
                        param.requires_grad = False
        for group in opt.param_groups:
            for param in group["params"]:
                param.requires_grad = saved.get(param, True)
        self.__dict__["_toggled_requires_grad"] = saved

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Put back the ``requires_grad`` flags :meth:`toggle_optimizer` switched off."""
        opt = getattr(optimizer, "optimizer", optimizer)
        saved = self.__dict__.get("_toggled_requires_grad", {})
        for other in self.trainer.optimizers:
            if other is opt:
                continue
            for group in other.param_groups:
                for param in group["params"]:
                    if param in saved:
                        param.requires_grad = saved[param]
        self.__dict__["_toggled_requires_grad"] = {}

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Generator[None, None, None]:
        """:meth:`toggle_optimizer` for the ``with`` block, then :meth:`untoggle_optimizer`."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    @base_hook
    def on_validation_model_zero_grad(self) -> None:
        """Before each validation inside a fit (outside an accumulation window): the gradients are dropped, so that
        their memory is free while validation runs (the next step computes them anew), as in Lightning. Where no
        override is defined the loop does this without calling the hook."""
        self.zero_grad()

    # -- overridable steps (Lightning's defaults; an override is called by the loop) ---------------------
    @base_hook
    def predict_step(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        """The prediction of one batch: by default the module called on the batch."""
        return self(batch)

    @base_hook
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward of the training loss (overridable; the precision still scales the loss under 16-mixed)."""
        loss.backward(*args, **kwargs)

    @base_hook
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Step the optimizer (overridable): ``optimizer.step(closure=optimizer_closure)``, where the closure
        runs ``training_step``, ``zero_grad`` and ``backward``."""
        optimizer.step(closure=optimizer_closure)

    @base_hook
    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Zero the gradients (overridable)."""
        optimizer.zero_grad()

    @base_hook
    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step a learning-rate scheduler (overridable); ``metric`` is the monitored value, or None."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    @base_hook
    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip gradients before each optimizer step (overridable; calls :meth:`clip_gradients`)."""
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    @base_hook
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to the device (overridable): every tensor in nested containers."""
        from ember.core.hooks.defaults import move_to_device

        return move_to_device(batch, device)

    @base_hook
    def configure_callbacks(self) -> Any:
        """Callbacks of this module (overridable): each replaces the Trainer's callbacks of its type."""
        return []

    def all_gather(self, tensor: torch.Tensor, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process (a collective)."""
        return self.trainer.hook.all_gather(trainer=self.trainer, tensor=tensor, sync_grads=sync_grads)

    # -- checkpoints -------------------------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None,
                             strict: bool | None = None, weights_only: bool | None = True, checkpoint_io: Any = "torch",
                             **overrides: Any) -> Any:
        """Build the module from a checkpoint: ``cls(**saved hyperparameters, **overrides)``, then its weights.

        The hyperparameters are those stored by ``save_hyperparameters()``; ``overrides`` replace or add to
        them. ``map_location`` is where the module goes afterwards (e.g. ``"cuda"``); the file is always read
        to the CPU first. ``weights_only=False`` allows files holding arbitrary Python objects (only for files
        you trust). Reads ember checkpoints (full or weights-only) and PyTorch Lightning checkpoints. The
        module's ``on_load_checkpoint(checkpoint)`` runs before the weights are loaded (it may change
        ``checkpoint["state_dict"]``, as in Lightning); call ``.eval()`` for inference. ``strict=None`` takes the module's ``strict_loading`` (True unless the class sets it False).
        """
        from ember.core.checkpointing.checkpoint_format import load_module

        return load_module(cls, checkpoint_path, map_location=map_location, strict=strict,
                           weights_only=weights_only is not False, checkpoint_io=checkpoint_io, **overrides)

    # -- export (ember.export) ------------------------------------------------------------------------------
    def to_onnx(self, file_path: str | os.PathLike, input_sample: Any = None, **kwargs: Any) -> str:
        """Write the module as ONNX (:func:`ember.export.to_onnx`)."""
        from ember.export import to_onnx

        return to_onnx(self, file_path, input_sample, **kwargs)

    def to_torchscript(self, file_path: str | os.PathLike | None = None, method: str = "script",
                       example_inputs: Any = None, **kwargs: Any) -> Any:
        """TorchScript by scripting or tracing (:func:`ember.export.to_torchscript`)."""
        from ember.export import to_torchscript

        return to_torchscript(self, file_path, method, example_inputs, **kwargs)

    def export(self, args: Any = None, file_path: str | os.PathLike | None = None, **kwargs: Any) -> Any:
        """A ``torch.export.ExportedProgram`` of ``forward`` (:func:`ember.export.export`)."""
        from ember.export import export

        return export(self, args, file_path, **kwargs)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_trainer"] = None
        return state


setattr(Module, STYLE_ATTR, "module")
#: Events of callbacks only (LightningModule has no such method): a module may still define them.
_CALLBACK_ONLY = {"on_exception", "on_sanity_check_start", "on_sanity_check_end", "on_predict_model_train"}
add_base_hooks(Module, sorted((EVENT_HOOKS | NOT_CALLED) - _CALLBACK_ONLY))
