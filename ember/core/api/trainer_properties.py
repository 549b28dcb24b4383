"""What the Trainer shows plugins and the module: Lightning's read-only properties.

The run state lives in records the loop owns (:mod:`ember.core.loop.state`); the properties here read it, most
through C-level getters, so that a plugin reading ``trainer.global_step`` at every step costs no Python call.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import signal
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import attrs
import torch

from ember.core.api.logger_adapter import unwrapped
from ember.core.api.role_plugins import RolesView
from ember.core.checkpointing.checkpoint import is_checkpoint_callback
from ember.core.errors import ConfigurationError
from ember.core.hooks.positional import defines
from ember.core.loop.results import to_floats

if TYPE_CHECKING:
    from ember.core.hooks.config import TrainerConfig
    from ember.core.loop.loop_views import EvaluationLoopView, FitLoopView
    from ember.core.loop.loops import Loops
    from ember.core.loop.state import TrainerState


def _rank(name: str, doc: str) -> Any:
    """A Trainer property for one of the process's ranks, kept in ``_<name>`` (set once the processes are known);
    a property of the class, so that it can be patched there (``mock.patch.object(Trainer, "local_rank")``)."""
    def setter(trainer: Any, value: int) -> None:
        trainer.__dict__["_" + name] = value

    return property(operator.attrgetter("_" + name), setter, doc=doc)


class NoProfiler:
    """``trainer.profiler`` when no profiler is on (Lightning's ``PassThroughProfiler``): ``with
    trainer.profiler.profile("name"):`` in a module's code times nothing and costs nothing."""

    def start(self, action_name: str) -> None:
        """Nothing to start."""

    def stop(self, action_name: str) -> None:
        """Nothing to stop."""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Generator[str, None, None]:
        yield action_name

    def summary(self) -> str:
        return ""

    def describe(self) -> None:
        """Nothing to report."""


def _read(path: str, doc: str, writable: bool = False) -> Any:
    """A Trainer property that reads ``path`` (``"loop.progress.global_step"``); ``writable``: it may be set."""
    getter = operator.attrgetter(path)
    if not writable:
        return property(getter, doc=doc)
    owner, name = path.rsplit(".", 1)
    owner_of = operator.attrgetter(owner)

    def setter(trainer: Any, value: Any) -> None:
        setattr(owner_of(trainer), name, value)

    return property(getter, setter, doc=doc)


class TrainerProperties:
    """The Trainer's read-only view of its run (``should_stop`` may be set)."""

    if TYPE_CHECKING:
        config: TrainerConfig
        loop: Loops
        state: TrainerState
        module: Any
        global_rank: int
        num_training_batches: float
        role_identities: dict[str, str]
        root_device: torch.device
        extra_plugins: list[tuple[str, Any]]
        autoload_plugins: list[tuple[str, Any]]
        role_plugins: dict[str, Any]
        world_size: int
        checkpointing: Any

    # ``global_rank`` and ``world_size`` stay plain attributes: the loop reads them at every step.
    local_rank: int = _rank("local_rank", "This process's rank among the processes of its node.")
    node_rank: int = _rank("node_rank", "The index of this process's node.")

    # The run state, read-only (``should_stop`` may be set): C-level getters, so reading them per step costs
    # no Python call.
    current_epoch: int = _read("loop.progress.current_epoch", "Epochs completed (the index of the running one).")
    global_step: int = _read("loop.progress.global_step", "Optimizer steps taken.")
    batch_idx: int = _read("loop.progress.batch_idx", "The index of the running training batch in its epoch.")
    should_stop: bool = _read("loop.progress.should_stop", "Set True to end the fit at the next point it may stop "
                              "(after ``min_epochs``/``min_steps``).", writable=True)
    sanity_checking: bool = _read("state.sanity_checking", "True during the validation run before training.")
    # Lightning's loop objects, as views of the state above (ember.core.loop.loop_views)
    fit_loop: FitLoopView = _read("loop.views.fit", "The fit's epochs, batches, optimizer steps and limits.")
    validate_loop: EvaluationLoopView = _read("loop.views.validate", "The batches trainer.validate() ran.")
    test_loop: EvaluationLoopView = _read("loop.views.test", "The batches trainer.test() ran.")
    predict_loop: EvaluationLoopView = _read("loop.views.predict", "The batches trainer.predict() ran.")
    callback_metrics: dict[str, torch.Tensor] = _read(
        "loop.metrics.callback_metrics", "Every value logged (step and epoch values), for callbacks to monitor.")
    logged_metrics: dict[str, torch.Tensor] = _read("loop.metrics.logged_metrics",
                                                    "The values logged with ``logger=True``.")

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def precision(self) -> str:
        return self.role_identities["precision"].split(".", 1)[1]

    @property
    def training(self) -> bool:
        return self.state.stage == "train"

    @property
    def validating(self) -> bool:
        return self.state.stage == "validate"

    @property
    def testing(self) -> bool:
        return self.state.stage == "test"

    @property
    def predicting(self) -> bool:
        return self.state.stage == "predict"

    @property
    def max_epochs(self) -> int | None:
        """The epoch limit (-1: none). Before a fit, the argument as given (None when not given); a fit without it
        runs 1000 epochs, or without an epoch limit when ``max_steps`` is given."""
        if self.config.max_epochs is None and not self.config.fast_dev_batches and not self.loop.limits_set:
            return None
        return self.loop.max_epochs

    @property
    def max_steps(self) -> int:
        return self.loop.max_steps

    @property
    def default_root_dir(self) -> str:
        return self.config.default_root_dir

    @property
    def accumulate_grad_batches(self) -> int:
        """Batches per optimizer step. Settable (between epochs, as Lightning's ``GradientAccumulationScheduler``
        does): the loop reads it at every batch."""
        return self.config.accumulate_grad_batches

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        self.config = attrs.evolve(self.config, accumulate_grad_batches=value)

    # -- the debugging and optimization arguments, as Lightning's Trainer shows them -------------------------
    @property
    def fast_dev_run(self) -> bool | int:
        """The ``fast_dev_run`` argument (``1`` reads as True, as in Lightning)."""
        value = self.config.fast_dev_run
        return True if value == 1 else value

    def _limit(self, stage: str) -> int | float:
        """``limit_<stage>_batches`` as Lightning reads it: 1.0 (everything) when not given; the number of batches
        under ``fast_dev_run``; ``overfit_batches`` for training and validation when that is on."""
        cfg = self.config
        if cfg.overfit_batches and stage in ("train", "val"):
            return cfg.overfit_batches
        if cfg.fast_dev_batches:
            return cfg.fast_dev_batches
        value = getattr(cfg, f"limit_{stage}_batches")
        return 1.0 if value is None else value

    def _set_limit(self, stage: str, value: int | float) -> None:
        changed: dict[str, Any] = {f"limit_{stage}_batches": value}
        self.config = attrs.evolve(self.config, **changed)  # checked as the argument is

    # settable between runs, as Lightning's attributes are (the next run reads the value)
    limit_train_batches = property(lambda self: self._limit("train"), lambda self, v: self._set_limit("train", v))
    limit_val_batches = property(lambda self: self._limit("val"), lambda self, v: self._set_limit("val", v))
    limit_test_batches = property(lambda self: self._limit("test"), lambda self, v: self._set_limit("test", v))
    limit_predict_batches = property(lambda self: self._limit("predict"),
                                     lambda self, v: self._set_limit("predict", v))

    @property
    def overfit_batches(self) -> int | float:
        return self.config.overfit_batches

    @property
    def val_check_interval(self) -> Any:
        """Batches (an int), the fraction of an epoch (a float) or the time (as given) between validations; 1.0
        when not given."""
        value = self.config.val_check_interval
        return 1.0 if value is None or self.config.fast_dev_batches else value

    @property
    def val_check_batch(self) -> int | float:
        """Training batches between two validations within an epoch: an int ``val_check_interval`` as given, else
        that fraction of ``num_training_batches`` (at least 1); ``inf`` while the number of batches is unknown (before
        a fit) and under a time-based ``val_check_interval``."""
        vci, n = self.val_check_interval, self.num_training_batches
        if isinstance(vci, int) and not isinstance(vci, bool):
            return vci
        if isinstance(vci, float) and not math.isinf(n):
            return max(1, int(n * vci))
        return math.inf

    @property
    def profiler(self) -> Any:
        """The run's profiler plugin (``Trainer(profiler=...)``), else a :class:`NoProfiler`."""
        found = next((p for ident, p in self.extra_plugins
                      if ident.startswith("profiler.") or getattr(p, "role", None) == "profiler"), None)
        return _NO_PROFILER if found is None else found

    @property
    def check_val_every_n_epoch(self) -> int | None:
        return 1 if self.config.fast_dev_batches else self.config.check_val_every_n_epoch

    @property
    def num_sanity_val_steps(self) -> int | float:
        """Validation batches run before training (``inf`` for -1, 0 under ``fast_dev_run``)."""
        if self.config.fast_dev_batches:
            return 0
        value = self.config.num_sanity_val_steps
        return math.inf if value == -1 else value

    @property
    def barebones(self) -> bool:
        """``Trainer(barebones=True)``: the loop alone, without logging, checkpoints, progress bar or summary."""
        return self.config.barebones

    @property
    def log_every_n_steps(self) -> int:
        return 0 if self.config.barebones else self.config.log_every_n_steps

    @property
    def gradient_clip_val(self) -> float | None:
        return self.config.gradient_clip_val

    @property
    def gradient_clip_algorithm(self) -> str | None:
        """``"norm"``, ``"value"`` or None (not given: clipping, if any, is by norm)."""
        value = self.config.gradient_clip_algorithm
        return value.lower() if isinstance(value, str) else value

    @property
    def loggers(self) -> list[Any]:
        """The run's logger plugins, in the order given (empty without a logger)."""
        return [unwrapped(p) for ident, p in self.extra_plugins
                if ident.startswith("logger.") or getattr(p, "role", None) == "logger"]

    @property
    def logger(self) -> Any:
        """The first logger, or None."""
        loggers = self.loggers
        return loggers[0] if loggers else None

    @property
    def log_dir(self) -> str:
        """The run folder: the first logger's ``log_dir`` (``<save_dir>/<name>/version_<n>``), else its ``save_dir``
        (MLflow), else ``default_root_dir``."""
        logger = self.logger
        log_dir = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)
        return os.fspath(log_dir) if log_dir else self.config.default_root_dir

    @property
    def callbacks(self) -> list[Any]:
        """The plugins of this trainer other than role plugins and loggers (callbacks, progress bar, ...)."""
        return [p for ident, p in self.extra_plugins
                if not (ident.startswith("logger.") or getattr(p, "role", None) == "logger")]

    @property
    def progress_bar_callback(self) -> Any:
        """The active progress-bar plugin, or None."""
        return next((p for ident, p in self.extra_plugins
                     if ident.startswith("progress.") or getattr(p, "role", None) == "progress"), None)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The ``prog_bar=True`` metrics as floats (reading them synchronises with the device)."""
        return to_floats(self.loop.metrics.progress_bar_metrics)

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the fit will take: epochs x steps per epoch, capped by ``max_steps``.

        As in Lightning: with ``max_epochs=-1``, ``max_steps`` (``inf`` when that is -1 too); while the number of
        training batches is unknown (before a fit, or an iterable loader without a length), ``max_steps``
        (-1 when it is not set).
        """
        max_steps, max_epochs = self.loop.limits()
        if max_epochs == -1:
            return math.inf if max_steps == -1 else max_steps
        if self.state.fn == "fit" and self.loop.fit_loaders and self.loop.training.train_loader is None:
            self.loop.load_train_data()  # asked for in configure_optimizers: the loader is read now
        if math.isinf(self.num_training_batches):
            return max_steps
        steps = math.ceil(self.num_training_batches / self.config.accumulate_grad_batches) * max(max_epochs, 1)
        return min(steps, max_steps) if max_steps != -1 else steps

    @property
    def arguments(self) -> dict[str, Any]:
        """The keyword arguments this Trainer was built with, as given (a copy): a strategy that starts its
        processes from inside the script (``strategy="ddp_spawn"``) builds the Trainer again from them there."""
        return dict(getattr(self, "_arguments", {}))

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The checkpoint callbacks of this trainer (``ModelCheckpoint`` and anything with ``best_model_path``)."""
        return [p for _, p in self.extra_plugins + self.autoload_plugins if is_checkpoint_callback(p)]

    @property
    def checkpoint_callback(self) -> Any:
        """The first checkpoint callback, or None."""
        found = self.checkpoint_callbacks
        return found[0] if found else None

    # -- Lightning's remaining public attributes -------------------------------------------------------------
    @property
    def min_epochs(self) -> int | None:
        return self.config.min_epochs

    @property
    def min_steps(self) -> int | None:
        return self.config.min_steps

    @property
    def num_nodes(self) -> int:
        return self.config.num_nodes

    @property
    def num_devices(self) -> int:
        """Devices (processes) per node: from ``devices=`` (an int, a list, ``"0,1"``), else the run's, or before it
        the strategy's ``num_processes`` (a multi-process strategy under ``devices="auto"``/``-1``)."""
        devices = self.config.devices
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
            return devices
        if isinstance(devices, (list, tuple)):
            return len(devices)
        if isinstance(devices, str) and devices.strip() not in ("auto", "-1", ""):
            parts = [d for d in devices.split(",") if d.strip()]
            return len(parts) if len(parts) > 1 or devices.strip().endswith(",") else int(parts[0])
        planned = getattr(self.strategy, "num_processes", None) if self.world_size == 1 else None
        if isinstance(planned, int) and planned > 0:
            return planned
        return max(1, self.world_size // max(1, self.config.num_nodes))

    @property
    def device_ids(self) -> list[int]:
        """The device indices of this node (``devices=[1, 3]`` gives ``[1, 3]``)."""
        devices = self.config.devices
        if isinstance(devices, (list, tuple)):
            return [int(d) for d in devices]
        if isinstance(devices, str) and "," in devices:
            return [int(d) for d in devices.split(",") if d.strip()]
        return list(range(self.num_devices))

    @property
    def accelerator(self) -> Any:
        """The active accelerator plugin (its identity: ``trainer.role_identities["accelerator"]``)."""
        return self.role_plugins["accelerator"]

    @property
    def strategy(self) -> Any:
        """The active strategy plugin."""
        return self.role_plugins["strategy"]

    @property
    def precision_plugin(self) -> Any:
        """The active precision plugin (``trainer.precision`` is its name)."""
        return self.role_plugins["precision"]

    @property
    def _accelerator_connector(self) -> RolesView:
        """Lightning's private connector, as code written for Lightning reads it: the roles chosen, read-only."""
        return RolesView(self)

    @property
    def scaler(self) -> Any:
        """The gradient scaler of a 16-mixed precision plugin, else None."""
        return getattr(self.role_plugins["precision"], "scaler", None)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """What a ``DistributedSampler`` of this process needs, or None in a single process."""
        return {"num_replicas": self.world_size, "rank": self.global_rank} if self.world_size > 1 else None

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """The early-stopping callbacks of this trainer (anything with ``patience`` and ``wait_count``)."""
        return [p for _, p in self.extra_plugins + self.autoload_plugins
                if hasattr(p, "patience") and hasattr(p, "wait_count")]

    @property
    def early_stopping_callback(self) -> Any:
        """The first early-stopping callback, or None."""
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def evaluating(self) -> bool:
        return self.state.stage in ("sanity_check", "validate", "test")

    @property
    def enable_validation(self) -> bool:
        """A fit would validate: the module has ``validation_step`` and ``limit_val_batches`` is not 0."""
        module = self.module
        return module is not None and defines(module, "validation_step") and \
            self.config.limit_val_batches != 0

    @property
    def is_last_batch(self) -> bool:
        """The running training batch is the last of its epoch (also when ``on_train_batch_start`` ended it)."""
        return self.loop.progress.batch_idx + 1 >= self.num_training_batches or self.loop.training.marks.cut

    @property
    def train_dataloader(self) -> Any:
        """The fit's training loader as it was given (None before a fit); the loop iterates a resumable copy."""
        return self.loop.training.given_train_loader

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader (a list when several; None when there is none)."""
        return _one_or_list(self.loop.training.val_loaders if self.state.fn == "fit"
                            else self.loop.eval_loaders.get("validate", []))

    @property
    def test_dataloaders(self) -> Any:
        return _one_or_list(self.loop.eval_loaders.get("test", []))

    @property
    def predict_dataloaders(self) -> Any:
        return _one_or_list(self.loop.eval_loaders.get("predict", []))

    @property
    def received_sigterm(self) -> bool:
        """SIGTERM asked the running fit to stop (it stops at the next safe point)."""
        return self.checkpointing.stop_signal == signal.SIGTERM

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """``with trainer.init_module(): model = MyModel()``: tensors made inside are created on the run's device and,
        under a ``*-true`` precision, in its dtype, so the module is not built on the CPU in float32 first.
        ``empty_init`` is accepted for Lightning's signature; the weights are initialised as usual. A sharded
        strategy builds large layers in the module's ``configure_model()`` hook instead."""
        if self.role_identities.get("strategy", "").startswith("strategy.fsdp"):
            raise ConfigurationError(
                "trainer.init_module() under a sharded strategy would build the whole module on one device: build "
                "large layers in the module's configure_model() hook, which runs in the strategy's sharded context.")
        dtype = _TRUE_DTYPES.get(self.role_identities.get("precision", "").split(".", 1)[-1])
        previous = torch.get_default_dtype()
        with torch.device(self.root_device):
            if dtype is not None:
                torch.set_default_dtype(dtype)
            try:
                yield
            finally:
                torch.set_default_dtype(previous)


#: The dtype a module is built in under a ``*-true`` precision (``trainer.init_module``).
_TRUE_DTYPES = {"64-true": torch.float64, "16-true": torch.float16, "bf16-true": torch.bfloat16}


def _one_or_list(loaders: list[Any]) -> Any:
    if not loaders:
        return None
    return loaders[0] if len(loaders) == 1 else loaders


_NO_PROFILER = NoProfiler()
