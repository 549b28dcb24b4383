"""``ember.Module``: an optional base class with Lightning's conveniences.

Any ``torch.nn.Module`` with ``training_step`` and ``configure_optimizers`` trains; this base only adds
``self.log``, ``self.trainer``, ``self.device``, ``save_hyperparameters``, ``manual_backward``,
``optimizers()`` and friends, with LightningModule's names. It deliberately defines no hook methods: a hook
nobody implements costs nothing per step, so the base must not implement them all as no-ops.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ember.core.trainer import Trainer


class AttributeDict(dict):
    """A dict whose keys are also attributes (``self.hparams.lr``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(f"no hyperparameter {key!r}; saved: {sorted(self)}") from exc

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class Module(torch.nn.Module):
    """Optional base class for models trained by ``ember.Trainer``."""

    #: Set to False to step optimizers yourself in ``training_step`` (``manual_backward``, ``optimizers()``).
    automatic_optimization: bool = True
    #: Properties TorchScript leaves out when it scripts the module (they are about training).
    __jit_unused_properties__: list[str] = ["trainer", "device", "dtype", "current_epoch", "global_step",
                                            "global_rank", "local_rank", "hparams"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Trainer | None = None
        self._hparams = AttributeDict()

    # -- the trainer and where we are --------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        trainer = self.__dict__.get("_trainer")
        if trainer is None and not self.__dict__.get("_jit_is_scripting"):  # TorchScript inspects every property
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer: call trainer.fit(...) first.")
        return trainer  # type: ignore[return-value]  # None only while TorchScript inspects the class

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

    # -- logging -----------------------------------------------------------------------------------------
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool = True,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
            sync_dist: bool = False, batch_size: int | None = None) -> None:
        """Record a metric; see the logging guide. Defaults follow Lightning: per step in training hooks,
        per epoch (mean over batches, weighted by batch size) in validation/test and epoch hooks."""
        self.trainer.loop.metrics.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step,
                                      on_epoch=on_epoch, reduce_fx=reduce_fx, sync_dist=sync_dist,
                                      batch_size=batch_size)

    def log_dict(self, dictionary: Mapping[str, Any], prog_bar: bool = False, logger: bool = True,
                 on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
                 sync_dist: bool = False, batch_size: int | None = None) -> None:
        """``self.log`` for every item of ``dictionary``."""
        for name, value in dictionary.items():
            self.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                     reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        trainer = self.__dict__.get("_trainer")
        if trainer is None or trainer.is_global_zero:
            print(*args, **kwargs)

    # -- hyperparameters ---------------------------------------------------------------------------------
    @property
    def hparams(self) -> AttributeDict:
        return self.__dict__.setdefault("_hparams", AttributeDict())

    def save_hyperparameters(self, *args: Any, ignore: str | list[str] | None = None) -> None:
        """Store the ``__init__`` arguments of the caller in ``self.hparams`` (all of them, or those named).

        Modules and tensors are skipped unless named; ``ignore`` removes names. Saved in checkpoints and
        passed to loggers' ``log_hyperparams``.
        """
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        caller = frame.f_back
        info = inspect.getargvalues(caller)
        names = [n for n in info.args if n != "self"]
        values: dict[str, Any] = {n: info.locals[n] for n in names}
        if info.keywords:
            values.update(info.locals.get(info.keywords, {}))
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
        if args and all(isinstance(a, str) for a in args):
            values = {k: v for k, v in values.items() if k in args}
        elif len(args) == 1 and isinstance(args[0], Mapping):
            values = dict(args[0])
        else:
            values = {k: v for k, v in values.items()
                      if not isinstance(v, (torch.nn.Module, torch.Tensor))}
        self.hparams.update({k: v for k, v in values.items() if k not in ignored})

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
        scaling) and ``on_after_backward``. Use instead of ``loss.backward()``."""
        self.trainer.loop.training.backward(loss, None)

    def clip_gradients(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> Any:
        """Clip the optimizer's gradients through the precision/strategy (manual optimization)."""
        if gradient_clip_val is None:
            return None
        opt = getattr(optimizer, "optimizer", optimizer)
        return self.trainer.loop.training.clip_gradients(opt, gradient_clip_val, gradient_clip_algorithm or "norm")

    def all_gather(self, tensor: torch.Tensor, sync_grads: bool = False) -> torch.Tensor:
        """Gather ``tensor`` from every process (a collective)."""
        return self.trainer.hook.all_gather(trainer=self.trainer, tensor=tensor, sync_grads=sync_grads)

    # -- checkpoints -------------------------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None,
                             strict: bool = True, weights_only: bool = True, checkpoint_io: Any = "torch",
                             **overrides: Any) -> Any:
        """Build the module from a checkpoint: ``cls(**saved hyperparameters, **overrides)``, then its weights.

        The hyperparameters are those stored by ``save_hyperparameters()``; ``overrides`` replace or add to
        them. ``map_location`` is where the module goes afterwards (e.g. ``"cuda"``); the file is always read
        to the CPU first. ``weights_only=False`` allows files holding arbitrary Python objects (only for files
        you trust). Reads ember checkpoints (full or weights-only) and PyTorch Lightning checkpoints. The
        module's ``on_load_checkpoint(checkpoint)`` runs after the weights are loaded; call ``.eval()`` for
        inference.
        """
        from ember.core.checkpoint_format import load_module

        return load_module(cls, checkpoint_path, map_location=map_location, strict=strict,
                           weights_only=weights_only, checkpoint_io=checkpoint_io, **overrides)

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
