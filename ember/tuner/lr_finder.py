"""The learning-rate range test: train a few steps with a rising learning rate and watch the loss."""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.tuner._trial import restored, trial_trainer


class LRFinder:
    """The result of :meth:`ember.tuner.Tuner.lr_find`: ``results = {"lr": [...], "loss": [...]}`` (the loss
    smoothed exponentially, as it was recorded step by step), :meth:`suggestion` and :meth:`plot`."""

    def __init__(self, mode: str, min_lr: float, max_lr: float, num_training: int) -> None:
        self.mode, self.min_lr, self.max_lr, self.num_training = mode, min_lr, max_lr, num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._index: int | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based): Lightning's schedule, ``min_lr`` for the first
        step, then the points ``2/n, 3/n, ..., n/n`` of the way to ``max_lr`` (the last step trains at ``max_lr``)."""
        fraction = 0.0 if step == 0 else min(step + 1, self.num_training) / self.num_training
        if self.mode == "exponential":
            return self.min_lr * (self.max_lr / self.min_lr) ** fraction
        return self.min_lr + (self.max_lr - self.min_lr) * fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the loss falls fastest (the steepest negative slope of the recorded loss,
        ignoring the first ``skip_begin`` and last ``skip_end`` points), or None with too few points."""
        losses = self.results["loss"][skip_begin:len(self.results["loss"]) - skip_end]
        lrs = self.results["lr"][skip_begin:len(self.results["lr"]) - skip_end]
        finite = [(lr, loss) for lr, loss in zip(lrs, losses, strict=True) if math.isfinite(loss)]
        if len(finite) < 2:
            self._index = None
            return None
        values = torch.tensor([loss for _, loss in finite], dtype=torch.float64)
        slope = torch.gradient(values)[0]
        best = int(torch.argmin(slope))
        self._index = skip_begin + self.results["lr"][skip_begin:].index(finite[best][0])
        return finite[best][0]

    def plot(self, path: str | os.PathLike | None = None, suggest: bool = True) -> Any:
        """A matplotlib Figure of loss against learning rate (log scale for the exponential mode), with the
        suggestion marked; with ``path``, also saved there as a PNG."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 4), tight_layout=True)
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        ax.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("loss (smoothed)")
        if suggest and self.suggestion() is not None and self._index is not None:
            i = self._index
            ax.plot(self.results["lr"][i], self.results["loss"][i], "o", color="red", markersize=8,
                    label=f"suggestion: {self.results['lr'][i]:.3g}")
            ax.legend()
        if path is not None:
            fig.savefig(os.fspath(path), dpi=100)
        return fig


class _RangeTest:
    """Sets each optimizer step's learning rate and records the smoothed loss; stops on divergence."""

    identity = "tuner.lr-range-test"

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.finder, self.threshold, self.beta = finder, early_stop_threshold, beta
        self._avg, self._best, self._step, self._stop = 0.0, math.inf, 0, False

    @hookimpl
    def on_train_batch_start(self) -> int | None:
        return -1 if self._stop else None

    @hookimpl
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        lr = self.finder.lr_at(self._step)
        for group in optimizer.param_groups:
            group["lr"] = lr

    @hookimpl
    def on_train_batch_end(self, trainer: Any, outputs: Any) -> None:
        if trainer.global_step == self._step:  # accumulating: no step yet
            return
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            raise ConfigurationError("lr_find needs training_step to return the loss (a tensor, or a dict with "
                                     "'loss').")
        value = float(loss.detach())  # one read per step: the tuner is not a training run
        self._avg = self.beta * self._avg + (1 - self.beta) * value
        smoothed = self._avg / (1 - self.beta ** (self._step + 1))
        self.finder.results["lr"].append(self.finder.lr_at(self._step))
        self.finder.results["loss"].append(smoothed)
        self._step += 1
        if not math.isfinite(smoothed) or self.threshold is not None and smoothed > self.threshold * self._best:
            self._stop = trainer.should_stop = True
        self._best = min(self._best, smoothed)


def lr_find(trainer: Any, model: torch.nn.Module, train_dataloaders: Any = None, datamodule: Any = None,
            min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
            early_stop_threshold: float | None = 4.0, update_attr: bool = True, attr_name: str = "") -> LRFinder:
    """Run the range test (see :meth:`ember.tuner.Tuner.lr_find`)."""
    if mode not in ("exponential", "linear"):
        raise ConfigurationError(f"lr_find(mode={mode!r}) is invalid: expected 'exponential' or 'linear'.")
    if not 0 < min_lr < max_lr:
        raise ConfigurationError(f"lr_find(min_lr={min_lr}, max_lr={max_lr}) is invalid: expected "
                                 "0 < min_lr < max_lr.")
    if num_training < 2:
        raise ConfigurationError(f"lr_find(num_training={num_training}) is invalid: expected at least 2 steps.")
    attr = _lr_attribute(model, attr_name) if update_attr else None
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    with restored(model, datamodule):
        trial = trial_trainer(trainer, [_RangeTest(finder, early_stop_threshold)], max_steps=num_training,
                              max_epochs=None)
        trial.fit(model, train_dataloaders=train_dataloaders, datamodule=datamodule)
    suggestion = finder.suggestion()
    if attr is not None and suggestion is not None:
        _set_attribute(model, attr, suggestion)
    return finder


def _lr_attribute(model: Any, attr_name: str) -> str:
    names = [attr_name] if attr_name else ["lr", "learning_rate"]
    for name in names:
        if _has_attribute(model, name):
            return name
    raise ConfigurationError(
        f"lr_find(update_attr=True) found no {' or '.join(repr(n) for n in names)} attribute (or hparams entry) "
        f"on {type(model).__name__} to update; add one and read it in configure_optimizers, pass attr_name=..., "
        "or pass update_attr=False.")


def _has_attribute(model: Any, name: str) -> bool:
    hparams = model.__dict__.get("_hparams") or {}
    return name in vars(model) or name in hparams


def _set_attribute(model: Any, name: str, value: float) -> None:
    if name in vars(model):
        setattr(model, name, value)
    hparams = model.__dict__.get("_hparams")
    if isinstance(hparams, dict) and name in hparams:
        hparams[name] = value
