"""Running a short trial fit for the tuner, and putting everything back afterwards."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch

import ember
from ember.core.loop.seed import preserved_rng

#: Trainer arguments a trial keeps from the user's trainer: where and how the math runs.
KEPT = ("accelerator", "devices", "precision", "strategy", "accumulate_grad_batches", "gradient_clip_val",
        "gradient_clip_algorithm", "deterministic", "benchmark", "default_root_dir")


def trial_trainer(trainer: Any, plugins: list[Any], **overrides: Any) -> Any:
    """A Trainer for one trial: the user's device, precision and strategy; no validation, logging, checkpoints,
    progress bar or user callbacks (they would write files and count steps that are not training)."""
    config = trainer.config
    kwargs = {name: getattr(config, name) for name in KEPT if hasattr(config, name)}
    kwargs.update(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                  num_sanity_val_steps=0, limit_val_batches=0, callbacks=plugins, **overrides)
    return ember.Trainer(**{k: v for k, v in kwargs.items() if v is not None})


@contextlib.contextmanager
def restored(module: torch.nn.Module, *owners: Any) -> Iterator[None]:
    """On exit, the module's parameters and buffers, its attributes (and ``hparams``), the attributes of
    ``owners`` (e.g. the DataModule) and every random generator are exactly what they were on entry."""
    state = {k: v.detach().clone() for k, v in module.state_dict(keep_vars=True).items()}
    attributes = [(obj, _plain_attributes(obj)) for obj in (module, *owners) if obj is not None]
    attached = module.__dict__.get("_trainer")
    device = next((p.device for p in module.parameters()), None)
    with preserved_rng(device):
        try:
            yield
        finally:
            with torch.no_grad():
                current = module.state_dict(keep_vars=True)
                for key, value in state.items():
                    current[key].data.copy_(value)  # in place: optimizers built later see the same tensors
            for obj, saved in attributes:
                obj.__dict__.update(saved)
            if "_trainer" in module.__dict__:
                module.__dict__["_trainer"] = attached


def _plain_attributes(obj: Any) -> dict[str, Any]:
    """The attributes a trial may change: numbers, strings and the hyperparameter dict (copied)."""
    saved: dict[str, Any] = {}
    for key, value in vars(obj).items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            saved[key] = value
        elif key in ("_hparams", "hparams") and isinstance(value, dict):
            saved[key] = copy.copy(value)
    return saved

