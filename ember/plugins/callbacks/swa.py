"""``callback.swa``: stochastic weight averaging (torch.optim.swa_utils) over the last epochs of a fit."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import torch
from torch.optim.swa_utils import SWALR, get_swa_multi_avg_fn, update_bn

from ember.core.errors import ConfigurationError
from ember.core.loop.seed import preserved_rng
from ember.hookspecs import hookimpl
from ember.plugins.callbacks.weight_averaging import WeightAveraging


class SWA(WeightAveraging):
    """Average the weights at the end of every epoch from ``swa_epoch_start`` on, with the learning rate
    annealed to ``swa_lrs`` by :class:`~torch.optim.swa_utils.SWALR` (stepped at the start of each SWA epoch).
    When training ends the average is put in the module and, if the module has BatchNorm layers, their
    statistics are recomputed with one pass over the training data (:func:`~torch.optim.swa_utils.update_bn`).

    :param swa_lrs: the SWA learning rate (one float, or one per parameter group); None keeps the current one.
    :param swa_epoch_start: the first averaged epoch: an int (0-based), or a float in (0, 1) as a fraction of
        ``max_epochs``.
    :param annealing_epochs: epochs SWALR takes to reach ``swa_lrs``.
    :param annealing_strategy: ``"cos"`` or ``"linear"``.
    :param validate_with_averaged: validate with the averaged weights once averaging has begun.

    Other schedulers keep stepping; SWALR works from the learning rate they leave (Lightning replaces them).
    The average and SWALR's state are in every full checkpoint, so a resumed fit ends bit for bit equal.
    """

    identity = "callback.swa"

    def __init__(self, swa_lrs: float | list[float] | None = None, swa_epoch_start: int | float = 0.8,
                 annealing_epochs: int = 10, annealing_strategy: str = "cos", validate_with_averaged: bool = True,
                 apply_at_end: bool = True) -> None:
        if annealing_strategy not in ("cos", "linear"):
            raise ConfigurationError(f"SWA(annealing_strategy={annealing_strategy!r}) is invalid: expected "
                                     "'cos' or 'linear'.")
        if isinstance(swa_epoch_start, float) and not 0.0 < swa_epoch_start < 1.0 \
                or isinstance(swa_epoch_start, int) and swa_epoch_start < 0:
            raise ConfigurationError(f"SWA(swa_epoch_start={swa_epoch_start!r}) is invalid: expected an int "
                                     ">= 0 (an epoch) or a float in (0, 1) (a fraction of max_epochs).")
        if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 1:
            raise ConfigurationError(f"SWA(annealing_epochs={annealing_epochs!r}) is invalid: expected an int >= 1.")
        super().__init__(use_buffers=False, validate_with_averaged=validate_with_averaged, apply_at_end=apply_at_end)
        self.swa_lrs = swa_lrs
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self.scheduler: SWALR | None = None
        self._start = 0
        self._train_loader: Any = None
        self._annealed_epoch = -1  # the last epoch whose start stepped SWALR (a resumed epoch starts twice)
        self._avg_fn = get_swa_multi_avg_fn()

    @hookimpl
    def on_fit_start(self, trainer: Any, module: Any) -> None:
        scheduler_state = (self._pending or {}).get("scheduler")
        self._annealed_epoch = int((self._pending or {}).get("annealed_epoch", -1))
        super().on_fit_start(trainer, module)
        if isinstance(self.swa_epoch_start, float):
            max_epochs = trainer.config.max_epochs
            if not max_epochs or max_epochs < 0:
                raise ConfigurationError("SWA(swa_epoch_start=<fraction>) needs Trainer(max_epochs=N); pass the "
                                         "first SWA epoch as an int instead.")
            self._start = int(math.ceil(max_epochs * self.swa_epoch_start))
        else:
            self._start = self.swa_epoch_start
        self.scheduler = None
        if scheduler_state is not None:  # resuming inside the SWA phase: rebuild SWALR as it was
            optimizer = self._optimizer(trainer)
            lrs = [group["lr"] for group in optimizer.param_groups]
            self.scheduler = self._make_scheduler(optimizer)
            self.scheduler.load_state_dict(scheduler_state)
            for group, lr in zip(optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr  # building SWALR stepped it once; the checkpoint's rates are the right ones

    def _optimizer(self, trainer: Any) -> torch.optim.Optimizer:
        if len(trainer.optimizers) != 1:
            raise ConfigurationError(f"SWA anneals one optimizer's learning rate; the module has "
                                     f"{len(trainer.optimizers)} optimizers.")
        return trainer.optimizers[0]

    def _make_scheduler(self, optimizer: torch.optim.Optimizer) -> SWALR:
        lrs = self.swa_lrs if self.swa_lrs is not None else [group["lr"] for group in optimizer.param_groups]
        return SWALR(optimizer, swa_lr=lrs, anneal_epochs=self.annealing_epochs,  # type: ignore[arg-type]
                     anneal_strategy=self.annealing_strategy)  # type: ignore[arg-type]

    @hookimpl
    def on_train_epoch_start(self, trainer: Any) -> None:
        if trainer.current_epoch < self._start or not trainer.optimizers \
                or trainer.current_epoch == self._annealed_epoch:
            return
        self._annealed_epoch = trainer.current_epoch
        if self.scheduler is None:
            self.scheduler = self._make_scheduler(self._optimizer(trainer))  # sets the first annealed rate
        else:
            with warnings.catch_warnings():
                # After a resume at an epoch boundary this process has not stepped the optimizer yet; the
                # order torch warns about is still right.
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()` before"))
                self.scheduler.step()

    @hookimpl
    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch >= self._start:
            self._update(module, self._avg_fn)

    @hookimpl
    def on_train_end(self, trainer: Any, module: Any) -> None:
        super().on_train_end(trainer, module)
        if self.apply_at_end and self._backup is not None and _has_batchnorm(module):
            loader = self._train_loader
            if loader is not None:
                device = next(module.parameters()).device
                with preserved_rng(device):  # draws nothing from the stream a resumed fit continues
                    update_bn(loader, module, device=device)

    @hookimpl(wrapper=True)
    def setup_module(self, trainer: Any) -> Any:
        # Called after configure_optimizers and before a resumed fit loads the optimizer state: a checkpoint
        # written during the SWA phase has SWALR's keys in the parameter groups, which the new optimizer must
        # have too (their values come from the checkpoint; a checkpoint without them drops them again).
        if getattr(trainer, "ckpt_path", None):
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group.setdefault("initial_lr", group["lr"])
                    group.setdefault("swa_lr", group["lr"])
        return (yield)

    @hookimpl(wrapper=True)
    def process_dataloader(self, stage: str) -> Any:
        loader = yield  # the training data as the strategy prepared it, for update_bn
        if stage == "train":
            self._train_loader = loader
        return loader

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.scheduler is not None:
            # torch before 2.5 keeps SWALR's annealing function in its state: a function is no checkpoint data,
            # and the rebuilt scheduler has it already
            state["scheduler"] = {k: v for k, v in self.scheduler.state_dict().items() if not callable(v)}
            state["annealed_epoch"] = self._annealed_epoch
        return state


def _has_batchnorm(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())
