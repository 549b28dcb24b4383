"""The models and data the benchmarks train: one definition, used by every loop that is compared.

Each :class:`Workload` says how to build its network, data, optimizer and scheduler, and how many epochs a
timed run lasts. Every loop (raw PyTorch, ember, Lightning, ignite) builds the same things from it, computes
the same loss, and validates the same way (loss and accuracy over the validation loader, once per epoch).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Workload:
    key: str
    title: str
    make_net: Callable[[], torch.nn.Module]
    make_data: Callable[[], tuple[DataLoader, DataLoader | None]]
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]
    make_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    epochs: int = 1

    def steps(self) -> int:
        """Optimizer steps in one timed run."""
        train, _ = self.make_data()
        return len(train) * self.epochs


# -- overhead-bound: a tiny MLP ----------------------------------------------------------------------------
TINY_STEPS = 1000


def tiny_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def tiny_loader(steps: int = TINY_STEPS, batch: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * batch, 32, generator=g)
    y = torch.randint(0, 10, (steps * batch,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)


def adamw(lr: float) -> Callable[[torch.nn.Module], torch.optim.Optimizer]:
    def make(net: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(net.parameters(), lr=lr)

    return make


def tiny(steps: int = TINY_STEPS) -> Workload:
    loader = tiny_loader(steps)
    return Workload("tiny", "tiny MLP 32-64-10, batch 32", tiny_net, lambda: (loader, None), adamw(1e-3))


def tiny_epochs(steps_per_epoch: int = 128, epochs: int = 8) -> Workload:
    """The tiny MLP in short epochs (no validation): what per-epoch work costs when epochs are 128 steps."""
    loader = tiny_loader(steps_per_epoch)
    return Workload("tiny128", f"tiny MLP, {epochs} epochs of {steps_per_epoch} steps", tiny_net,
                    lambda: (loader, None), adamw(1e-3), epochs=epochs)


SHORT_TRAIN, SHORT_VAL = 32, 8


def short_epochs(epochs: int = 16) -> Workload:
    """Short epochs, per-epoch work dominant: 32 training and 8 validation steps per epoch of the tiny MLP
    (with the defaults: validation, epoch-end logging and a checkpoint every epoch)."""
    train = tiny_loader(SHORT_TRAIN)
    val = tiny_loader(SHORT_VAL)
    return Workload("short", f"short epochs: {epochs} x ({SHORT_TRAIN} train + {SHORT_VAL} val steps), tiny MLP",
                    tiny_net, lambda: (train, val), adamw(1e-3), epochs=epochs)


# -- the digits demo ---------------------------------------------------------------------------------------
def digits(epochs: int = 10) -> Workload:
    """ember.demo's MLP (64-128-10 with dropout) on the 8x8 digits: AdamW, cosine schedule, validation after
    every epoch."""
    from ember.demo import DigitsClassifier, digits_loaders

    loaders = digits_loaders()

    def net() -> torch.nn.Module:
        return DigitsClassifier().net

    def cosine(opt: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)

    return Workload("digits", f"digits MLP 64-128-10, batch 64, {epochs} epochs + validation", net,
                    lambda: loaders, adamw(3e-3), cosine, epochs)


# -- compute-bound: a small CNN ----------------------------------------------------------------------------
def cnn_net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def cnn(steps: int = 64, batch: int = 32) -> Workload:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(steps * batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (steps * batch,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)

    def sgd(net: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    return Workload("cnn", f"CNN 3x32x32 -> 16-32-64 conv, batch {batch}", cnn_net, lambda: (loader, None), sgd)


# -- the shared step -----------------------------------------------------------------------------------------
def loss_of(net: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(net(x), y)


def val_of(net: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    logits = net(x)
    return torch.nn.functional.cross_entropy(logits, y), (logits.argmax(1) == y).float().mean()


# -- the raw loop: what a user writes without a framework ---------------------------------------------------
def raw_run(workload: Workload, clock: Clock, device: str = "cpu", net: torch.nn.Module | None = None,
            autocast: torch.dtype | None = None, scaled: bool = False) -> float:
    """``scaled``: the loss goes through a ``torch.amp.GradScaler`` (what 16-mixed takes)."""
    net = (workload.make_net() if net is None else net).to(device)
    opt = workload.make_optimizer(net)
    scaler = torch.amp.GradScaler(device.split(":")[0]) if scaled else None
    sched = workload.make_scheduler(opt) if workload.make_scheduler else None
    train, val = workload.make_data()
    ctx: Callable[[], Any] = (lambda: torch.autocast(device.split(":")[0], dtype=autocast)) if autocast \
        else contextlib.nullcontext
    non_blocking = device != "cpu"
    start = clock()
    for _ in range(workload.epochs):
        net.train()
        for x, y in train:
            x, y = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
            with ctx():
                loss = loss_of(net, (x, y))
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        if sched is not None:
            sched.step()
        if val is not None:
            net.eval()
            correct = torch.zeros((), device=device)
            with torch.inference_mode():
                for x, y in val:
                    x, y = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
                    with ctx():
                        _, acc = val_of(net, (x, y))
                    correct += acc
            float(correct)  # what printing the accuracy costs
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return clock() - start
