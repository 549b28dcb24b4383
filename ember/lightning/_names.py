"""Lightning's names for ember's classes, imported on first use: the module ``__getattr__`` of
:mod:`ember.lightning.callbacks` and :mod:`ember.lightning.loggers`."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, aliases: dict[str, tuple[str, str]], missing: dict[str, str],
               kind: str = "") -> Callable[[str], Any]:
    """A module ``__getattr__``: ``aliases[name]`` is ``(ember module, ember class)``, imported when first asked
    for; ``missing[name]`` says what to use instead of a Lightning name ember has no class for: the name imports,
    as a class that raises that message when used (``kind``, e.g. ``" callback"``, follows the name in it)."""
    made: dict[str, type] = {}

    def __getattr__(name: str) -> Any:
        found = aliases.get(name)
        if found is not None:
            return getattr(importlib.import_module(found[0]), found[1])
        if name in missing:
            if name not in made:
                made[name] = unsupported(name, f"ember has no {name}{kind}: {missing[name]}.", module)
            return made[name]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


class UnsupportedError(NotImplementedError):
    """A Lightning name that ember provides only so that imports work: using it raises this, saying what to use."""


def unsupported(name: str, message: str, module: str = __name__) -> type:
    """A class named ``name`` that imports (and can be subclassed, or named in ``isinstance``) but raises
    :class:`UnsupportedError` with ``message`` when it, or a subclass, is instantiated."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedError(message)

    return type(name, (), {"__init__": __init__, "__module__": module, "__doc__": message})


class CoversEmber(type):
    """The metaclass of a Lightning-named subclass of an ember class that changes only defaults (a logger's
    ``name``): every instance of the ember class counts as an instance of it, as Lightning code expects of the
    objects ember builds (``isinstance(trainer.logger, TensorBoardLogger)``). A user's subclass of it is checked
    as usual."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls.__dict__.get("_covers_ember", False):
            return isinstance(obj, cls.__mro__[1])
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        if cls.__dict__.get("_covers_ember", False):
            return issubclass(sub, cls.__mro__[1])
        return super().__subclasscheck__(sub)


def _lightning_progress_bar() -> Any:
    module = importlib.import_module("ember.lightning.pytorch.callbacks.progress.tqdm_progress")
    return module.TQDMProgressBar()


#: The folder Lightning's default logger writes its runs into (``<default_root_dir>/lightning_logs/version_<n>``).
LIGHTNING_LOGS = "lightning_logs"


def _lightning_tensorboard_logger() -> Any:
    return importlib.import_module("ember.lightning.pytorch.loggers.tensorboard").TensorBoardLogger()


def _lightning_csv_logger() -> Any:
    return importlib.import_module("ember.lightning.pytorch.loggers.csv_logs").CSVLogger()


def _lightning_dummy_logger() -> Any:
    return importlib.import_module("ember.lightning.pytorch.loggers.logger").DummyLogger()


def _lightning_model_checkpoint() -> Any:
    return importlib.import_module("ember.lightning.pytorch.callbacks.model_checkpoint").ModelCheckpoint()


def _lightning_step_axis() -> str:
    return "lightning"


#: What a Trainer taken through Lightning's names switches on by default, by identity.
LIGHTNING_DEFAULTS: dict[str, Callable[[], Any]] = {
    "progress.tqdm": _lightning_progress_bar,
    "callback.model-checkpoint": _lightning_model_checkpoint,
    "logger.tensorboard": _lightning_tensorboard_logger,
    "logger.csv": _lightning_csv_logger,
    "logger.null": _lightning_dummy_logger,  # what stands in for the loggers under fast_dev_run
    "logging.lightning-steps": _lightning_step_axis,  # the step the loggers are given (ember.core.loop.metrics)
}


def lightning_trainer() -> type:
    """ember's Trainer, as a script gets it through Lightning's names (``pl.Trainer``, ``from lightning.pytorch
    import Trainer``): from then on in this process, the default progress bar (``enable_progress_bar=True``) is
    Lightning's ``TQDMProgressBar`` (its bars in ``train_progress_bar``, ..., drawn on any output), the default
    checkpoint callback (``enable_checkpointing=True``) is Lightning's ``ModelCheckpoint`` (no ``last.ckpt``), the
    default logger (``logger=True``) writes its runs to ``<default_root_dir>/lightning_logs/version_<n>``, the
    loggers' stand-in under ``fast_dev_run`` is Lightning's ``DummyLogger``, the loggers are given Lightning's step
    axis (:data:`ember.core.loop.metrics.LIGHTNING_STEPS`), the few-workers check counts CPUs through
    ``lightning.fabric.utilities.data._num_cpus_available`` and device selection counts GPUs through
    ``lightning.fabric.accelerators.cuda.num_cuda_devices`` (and ``.mps``'s), as the Lightning code the script was
    written for expects, and Trainers have ``_data_connector`` (:mod:`ember.lightning.data_connector`) and
    ``_checkpoint_connector`` (the connector methods Lightning code calls). ``ember.Trainer`` reached by ember's own
    names changes nothing."""
    from ember.core.api.trainer import Trainer
    from ember.core.hooks import options
    from ember.lightning import data_connector
    from ember.lightning.fabric.accelerators import route_device_counts
    from ember.lightning.fabric.utilities.data import route_cpu_count
    from ember.lightning.pytorch.trainer import checkpoint_connector

    for identity, factory in LIGHTNING_DEFAULTS.items():
        if options.substitute_for(identity) is None:
            options.substitute(identity, factory)
    route_cpu_count()
    route_device_counts()
    data_connector.install(Trainer)
    checkpoint_connector.install(Trainer)  # Lightning's private connector, over trainer.checkpointing
    return Trainer
