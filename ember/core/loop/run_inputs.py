"""What ``trainer.fit``/``validate``/``test``/``predict`` were given: checked before anything runs."""

from __future__ import annotations

from typing import Any

import torch

from ember.core.errors import ConfigurationError, warn_user
from ember.core.hooks.positional import defines


class ModelError(ConfigurationError, TypeError):
    """``trainer.<fn>()`` has no model it can run: a ``TypeError`` (as Lightning raises), and a
    :class:`ConfigurationError`."""


_STEP_METHOD = {"fit": "training_step", "validate": "validation_step", "test": "test_step",
                "predict": "predict_step"}


def check_run_inputs(fn: str, model: Any, current: Any, datamodule: Any, loaders: dict[str, Any]) -> Any:
    """The module ``trainer.<fn>()`` runs: ``model``, else the trainer's ``current`` one; a clear error for
    what cannot run."""
    if model is None:
        model = current
        if model is None:
            raise ModelError(f"`trainer.{fn}()` requires a `LightningModule` (any torch.nn.Module with "
                             f"{_STEP_METHOD[fn]}()) when no earlier run of this trainer had one: pass it as the "
                             "first argument.")
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"trainer.{fn}(model=...) expects a torch.nn.Module with the step methods, "
                         f"got {type(model).__name__}.")
    check_module(fn, model)
    if datamodule is not None and any(v is not None for v in loaders.values()):
        raise ConfigurationError(f"trainer.{fn}() got both dataloaders and a datamodule; pass one of them.")
    return model


def default_ckpt_path(trainer: Any, model: Any, ckpt_path: Any, fn: str) -> Any:
    """As in Lightning, ``validate``/``test``/``predict`` called without a model after a fit run the best
    checkpoint's weights when a checkpoint callback has saved one (Lightning raises where none has; ember then
    runs the module as it is in memory)."""
    if model is not None or ckpt_path is not None or trainer.module is None:
        return ckpt_path
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    if best:
        warn_user(f"trainer.{fn}() got no model and no ckpt_path. The best model of the previous `fit` call will be "
                  f"used: {best}. Pass ckpt_path='best' to keep this choice, ckpt_path='last' for the newest "
                  "checkpoint or a file's path; passing any value silences this warning.")
        return "best"
    return None


def check_module(fn: str, model: Any) -> None:
    """A module ``trainer.<fn>()`` can run: not a ``torch.compile`` wrapper, with the step method it needs."""
    needed = _STEP_METHOD[fn]
    inner = getattr(model, "_orig_mod", None) if type(model).__name__ == "OptimizedModule" else None
    if isinstance(inner, torch.nn.Module):
        # torch.compile(model) wraps the module: its step methods would run uncompiled, and its hooks are
        # not the wrapper's
        raise ConfigurationError(
            f"trainer.{fn}() got torch.compile({type(inner).__name__}), a wrapper whose {needed}() would run "
            f"the module uncompiled. Compile the module in place instead: model.compile() (or compile a "
            f"submodule, self.net = torch.compile(self.net)), and pass the module itself.")
    if not (callable(getattr(model, needed, None)) if fn == "predict" else defines(model, needed)):
        raise ModelError(f"{type(model).__name__} has no {needed}() method, which trainer.{fn}() needs. Define "
                         f"{needed}(self, batch, batch_idx): the model must be a `LightningModule` or a "
                         f"torch.nn.Module with {needed}(), got `{type(model).__name__}`.")
    if fn == "fit" and not defines(model, "configure_optimizers"):
        raise ConfigurationError(f"{type(model).__name__} has no configure_optimizers() method, which "
                                 "trainer.fit() needs. Return an optimizer from it, e.g. "
                                 "torch.optim.AdamW(self.parameters(), lr=1e-3).")


def looks_like_datamodule(obj: Any) -> bool:
    """``trainer.fit(model, dm)``: a DataModule passed where the dataloaders go."""
    return any(defines(obj, n) for n in
               ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")) and not \
        isinstance(obj, torch.utils.data.DataLoader)
