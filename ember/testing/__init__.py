"""Helpers for testing ember plugins: a small model, data, and a recorder of hook calls.

Also a pytest plugin (``ember.testing.pytest_plugin``, registered through the ``pytest11`` entry point) that
provides the ``ember_trainer``, ``tiny_model``, ``tiny_loaders`` and ``hook_recorder`` fixtures.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from ember.core.module import Module
from ember.core.plugin_manager import EVENT_HOOKS
from ember.hookspecs import hookimpl

__all__ = ["HookRecorder", "TinyClassifier", "tiny_dataset", "tiny_loaders", "FAST_TRAINER_ARGS"]

#: Trainer arguments for quick tests: one short epoch, no sanity check, and quiet (no progress bar, model
#: summary or logger files).
FAST_TRAINER_ARGS: dict[str, Any] = {"max_epochs": 1, "num_sanity_val_steps": 0, "enable_progress_bar": False,
                                     "enable_model_summary": False, "logger": False}


def tiny_dataset(n: int = 64, features: int = 8, classes: int = 3, seed: int = 0) -> TensorDataset:
    """A learnable classification set: labels are a fixed linear function of the features."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    return TensorDataset(x, (x @ w).argmax(1))


def tiny_loaders(n: int = 64, batch_size: int = 8, shuffle: bool = False, **kwargs: Any) -> tuple[DataLoader, DataLoader]:
    """(train, val) loaders over :func:`tiny_dataset`."""
    ds = tiny_dataset(n, **kwargs)
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle), DataLoader(ds, batch_size=batch_size)


class TinyClassifier(Module):
    """A two-layer classifier that logs ``train_loss``, ``val_loss``, ``val_acc``, ``test_acc``."""

    def __init__(self, features: int = 8, classes: int = 3, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, classes))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class HookRecorder:
    """Records every hook call of a trainer's runs, in order, with the plugins that implement it.

    ``recorder.attach(trainer)`` before ``fit``; then ``recorder.names`` is the list of hook names called
    and ``recorder.calls`` the list of ``(hook name, [plugin identities])``. Event hooks nobody implements
    are not called by the loop, so the recorder also registers a plugin implementing every event hook;
    ``events_only=True`` keeps only event hooks in ``names``.
    """

    def __init__(self, events_only: bool = False) -> None:
        self.events_only = events_only
        self.calls: list[tuple[str, list[str]]] = []
        self.kwargs: list[dict[str, Any]] = []

    def attach(self, trainer: Any) -> HookRecorder:
        pm = trainer.plugin_manager

        def before(hook_name: str, impls: list, kwargs: dict) -> None:
            if self.events_only and hook_name not in EVENT_HOOKS:
                return
            self.calls.append((hook_name, [i.plugin_name for i in impls]))
            self.kwargs.append(dict(kwargs))

        def after(outcome: Any, hook_name: str, impls: list, kwargs: dict) -> None:
            pass

        pm.add_hookcall_monitoring(before, after)
        trainer.extra_plugins.append(("testing.every-event", _every_event_plugin()))
        return self

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def clear(self) -> None:
        self.calls.clear()
        self.kwargs.clear()


def _every_event_plugin() -> Any:
    def make(name: str) -> Any:
        def impl(self: Any) -> None:
            return None

        impl.__name__ = name
        return hookimpl(trylast=True)(impl)

    namespace = {name: make(name) for name in sorted(EVENT_HOOKS)
                 if name not in ("on_before_batch_transfer", "on_after_batch_transfer")}
    return type("EveryEvent", (), namespace)()
