"""The training loops the benchmarks compare, each building the same model, data and optimizer from a
:class:`~benchmarks.workloads.Workload`.

A loop is built into a *run*: a function that trains one fresh model for ``workload.epochs`` epochs and
returns the seconds its training took on the benchmark's clock. Set-up (building the model, the optimizer,
the Trainer or Engine) is outside the timed part; everything ``fit`` does (registration, sanity check,
validation, logging, checkpoints) is inside it, as is everything the raw loop does.

* ``raw``: the plain PyTorch loop a user would write (train, step the scheduler, validate with a single read
  of the accuracy per epoch).
* ``ember``: every optional Trainer feature off (progress bar, logger, checkpointing, model summary, the
  sanity check), and the module logs nothing per step.
* ``ember+defaults``: the Trainer's defaults (progress bar, CSV logger, a checkpoint each epoch, model
  summary, sanity check), and the module logs its loss every step with ``prog_bar=True``.
* ``lightning`` / ``lightning+defaults``: the same two configurations with PyTorch Lightning (its CSV
  logger, so that both write the same thing), when it is installed.
* ``ignite``: pytorch-ignite's ``create_supervised_trainer`` (and an evaluator per epoch), when installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch

import ember
from benchmarks.workloads import Workload, loss_of, raw_run, val_of

Clock = Callable[[], float]
__all__ = ["raw_run"]
Run = Callable[[], float]

#: Trainer arguments that switch ember's optional features off, for those this version has.
EMBER_OFF = {"enable_progress_bar": False, "logger": False, "enable_checkpointing": False,
             "enable_model_summary": False, "num_sanity_val_steps": 0, "detect_nonfinite_loss": False}


def ember_off_args() -> dict[str, Any]:
    names = {f.name for f in attrs.fields(ember.TrainerConfig)}
    try:  # the arguments plugins declare (an older ember keeps them all in TrainerConfig)
        from ember.core.hooks.options import declared_options

        names |= {option.name for option in declared_options()}
    except ImportError:
        pass
    return {k: v for k, v in EMBER_OFF.items() if k in names}


def lightning_module() -> Any:
    """``lightning.pytorch`` or ``pytorch_lightning``, whichever is installed (None if neither)."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            if importlib.util.find_spec(name.split(".")[0]) is not None:
                return importlib.import_module(name)
        except ImportError:
            continue
    return None


def ignite_available() -> bool:
    return importlib.util.find_spec("ignite") is not None


def available_loops() -> list[str]:
    loops = ["raw", "ember", "ember+defaults"]
    if lightning_module() is not None:
        loops += ["lightning", "lightning+defaults"]
    if ignite_available():
        loops.append("ignite")
    return loops


# -- ember -------------------------------------------------------------------------------------------------
class TaskMethods:
    """The module's methods, shared by the ember and the Lightning module (the same code in both)."""

    net: torch.nn.Module
    workload: Workload
    log_steps: bool
    log: Callable[..., None]

    def setup_task(self, workload: Workload, log_steps: bool, net: torch.nn.Module | None) -> None:
        self.net = workload.make_net() if net is None else net
        self.workload = workload
        self.log_steps = log_steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = loss_of(self.net, batch)
        if self.log_steps:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = val_of(self.net, batch)
        self.log("val_loss", loss)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self) -> Any:
        opt = self.workload.make_optimizer(self.net)
        if self.workload.make_scheduler is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": self.workload.make_scheduler(opt)}


class EmberTask(TaskMethods, ember.Module):
    def __init__(self, workload: Workload, log_steps: bool, net: torch.nn.Module | None = None) -> None:
        ember.Module.__init__(self)
        self.setup_task(workload, log_steps, net)


@contextlib.contextmanager
def scratch_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="ember-bench-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ember_run(workload: Workload, clock: Clock, defaults: bool, device: str = "cpu",
              net: torch.nn.Module | None = None, log_steps: bool | None = None, **trainer_args: Any) -> float:
    """One run; ``defaults`` chooses the Trainer's defaults or everything off (``trainer_args`` override
    either), and whether the module logs its loss every step unless ``log_steps`` says."""
    model = EmberTask(workload, log_steps=defaults if log_steps is None else log_steps, net=net)
    train, val = workload.make_data()
    with scratch_dir() as root:
        args = {"max_epochs": workload.epochs, "accelerator": device.split(":")[0], "default_root_dir": root}
        if not defaults:
            args.update(ember_off_args())
        else:
            args["logger"] = "csv"  # as the Lightning row, though TensorBoard is the default when installed
        args.update(trainer_args)
        trainer = ember.Trainer(**args)
        start = clock()
        trainer.fit(model, train, val)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return clock() - start


# -- PyTorch Lightning ---------------------------------------------------------------------------------------
_lightning_task: Any = None


def _lightning_task_class() -> Any:
    global _lightning_task
    if _lightning_task is None:
        pl = lightning_module()

        class LightningTask(TaskMethods, pl.LightningModule):
            def __init__(self, workload: Workload, log_steps: bool, net: torch.nn.Module | None = None) -> None:
                pl.LightningModule.__init__(self)
                self.setup_task(workload, log_steps, net)

        _lightning_task = LightningTask
    return _lightning_task


def quiet_lightning() -> None:
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(lightning|pytorch_lightning|lightning_fabric)(\..*)?")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def lightning_run(workload: Workload, clock: Clock, defaults: bool, device: str = "cpu",
                  net: torch.nn.Module | None = None, precision: Any = None, callbacks: list | None = None) -> float:
    pl = lightning_module()
    quiet_lightning()
    model = _lightning_task_class()(workload, log_steps=defaults, net=net)
    train, val = workload.make_data()
    with scratch_dir() as root:
        args: dict[str, Any] = {"max_epochs": workload.epochs, "accelerator": device.split(":")[0], "devices": 1,
                                "default_root_dir": root}
        if precision is not None:
            args["precision"] = precision
        if callbacks:
            args["callbacks"] = callbacks
        if defaults:
            args["logger"] = pl.loggers.CSVLogger(root)
        else:
            args.update(enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
        trainer = pl.Trainer(**args)
        start = clock()
        trainer.fit(model, train, val)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return clock() - start


# -- pytorch-ignite ------------------------------------------------------------------------------------------
def ignite_run(workload: Workload, clock: Clock, device: str = "cpu",
               on_iteration: Callable[..., Any] | None = None) -> float:
    from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
    from ignite.metrics import Accuracy, Loss

    net = workload.make_net().to(device)
    opt = workload.make_optimizer(net)
    sched = workload.make_scheduler(opt) if workload.make_scheduler else None
    train, val = workload.make_data()
    loss_fn = torch.nn.functional.cross_entropy
    trainer = create_supervised_trainer(net, opt, loss_fn, device=device)
    if sched is not None:
        trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: sched.step())
    if val is not None:
        evaluator = create_supervised_evaluator(net, metrics={"acc": Accuracy(), "loss": Loss(loss_fn)},
                                                device=device)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: evaluator.run(val))
    if on_iteration is not None:
        trainer.add_event_handler(Events.ITERATION_COMPLETED, on_iteration)
    start = clock()
    trainer.run(train, max_epochs=workload.epochs)
    return clock() - start


def build(loop: str, workload: Workload, clock: Clock, device: str = "cpu") -> Run:
    """The run of ``loop`` on ``workload``."""
    if loop == "raw":
        return lambda: raw_run(workload, clock, device)
    if loop == "ember":
        return lambda: ember_run(workload, clock, defaults=False, device=device)
    if loop == "ember+defaults":
        return lambda: ember_run(workload, clock, defaults=True, device=device)
    if loop == "lightning":
        return lambda: lightning_run(workload, clock, defaults=False, device=device)
    if loop == "lightning+defaults":
        return lambda: lightning_run(workload, clock, defaults=True, device=device)
    if loop == "ignite":
        return lambda: ignite_run(workload, clock, device)
    raise ValueError(f"unknown loop {loop!r}; choose from {', '.join(available_loops())}")
