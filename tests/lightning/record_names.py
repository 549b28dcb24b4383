"""Records the public names of the ``lightning.pytorch`` modules that user code imports, for
tests/test_lightning_names.py.

A module's public names are its ``__all__`` where it has one, else the names not starting with ``_`` that the
module defines or re-exports, less other modules (``import os``) and the typing helpers every module imports.
Run in an environment with Lightning 2.6 installed (not a dependency of ember):
    python tests/lightning/record_names.py > tests/lightning/names.json
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
import typing

#: The modules of lightning.pytorch whose names user code imports.
MODULES = (
    "lightning.pytorch",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
    "lightning.pytorch.profilers",
    "lightning.pytorch.tuner",
    "lightning.pytorch.core",
    "lightning.pytorch.demos.boring_classes",
    "lightning.pytorch.utilities",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.pytorch.utilities.types",
    "lightning.pytorch.utilities.exceptions",
    "lightning.pytorch.utilities.model_summary",
    "lightning.pytorch.utilities.combined_loader",
    "lightning.pytorch.utilities.seed",
    "lightning.pytorch.utilities.model_helpers",
    "lightning.pytorch.trainer.states",
    "lightning.pytorch.strategies",
    "lightning.pytorch.accelerators",
    "lightning.pytorch.plugins",
    "lightning.pytorch.plugins.precision",
    "lightning.pytorch.plugins.io",
    "lightning.pytorch.plugins.environments",
    "lightning.pytorch.cli",
)
#: The deeper module paths that user code imports from (``from lightning.pytorch.callbacks.early_stopping import
#: EarlyStopping``), each recorded with the names it defines (its ``__all__`` where it has one; a package's names
#: are those it re-exports from its own modules).
SUBMODULES = (
    "lightning.pytorch.callbacks.model_checkpoint",
    "lightning.pytorch.callbacks.early_stopping",
    "lightning.pytorch.callbacks.progress",
    "lightning.pytorch.callbacks.progress.tqdm_progress",
    "lightning.pytorch.callbacks.progress.rich_progress",
    "lightning.pytorch.callbacks.progress.progress_bar",
    "lightning.pytorch.callbacks.lr_monitor",
    "lightning.pytorch.callbacks.callback",
    "lightning.pytorch.callbacks.model_summary",
    "lightning.pytorch.callbacks.stochastic_weight_avg",
    "lightning.pytorch.callbacks.timer",
    "lightning.pytorch.callbacks.lambda_function",
    "lightning.pytorch.callbacks.prediction_writer",
    "lightning.pytorch.callbacks.finetuning",
    "lightning.pytorch.callbacks.gradient_accumulation_scheduler",
    "lightning.pytorch.callbacks.on_exception_checkpoint",
    "lightning.pytorch.callbacks.checkpoint",
    "lightning.pytorch.callbacks.rich_model_summary",
    "lightning.pytorch.callbacks.pruning",
    "lightning.pytorch.callbacks.lr_finder",
    "lightning.pytorch.callbacks.batch_size_finder",
    "lightning.pytorch.callbacks.device_stats_monitor",
    "lightning.pytorch.callbacks.throughput_monitor",
    "lightning.pytorch.callbacks.spike",
    "lightning.pytorch.callbacks.weight_averaging",
    "lightning.pytorch.loggers.csv_logs",
    "lightning.pytorch.loggers.tensorboard",
    "lightning.pytorch.loggers.wandb",
    "lightning.pytorch.loggers.mlflow",
    "lightning.pytorch.loggers.logger",
    "lightning.pytorch.loggers.comet",
    "lightning.pytorch.loggers.neptune",
    "lightning.pytorch.trainer",
    "lightning.pytorch.trainer.trainer",
    "lightning.pytorch.core.module",
    "lightning.pytorch.core.datamodule",
    "lightning.pytorch.core.optimizer",
    "lightning.pytorch.profilers.simple",
    "lightning.pytorch.profilers.advanced",
    "lightning.pytorch.profilers.pytorch",
    "lightning.pytorch.profilers.profiler",
    "lightning.pytorch.profilers.base",
    "lightning.pytorch.tuner.tuning",
    "lightning.pytorch.utilities.parsing",
    "lightning.pytorch.utilities.grads",
    "lightning.pytorch.strategies.strategy",
    "lightning.pytorch.strategies.single_device",
    "lightning.pytorch.strategies.parallel",
    "lightning.pytorch.strategies.ddp",
    "lightning.pytorch.strategies.fsdp",
    "lightning.pytorch.strategies.deepspeed",
    "lightning.pytorch.strategies.model_parallel",
    "lightning.pytorch.accelerators.accelerator",
    "lightning.pytorch.accelerators.cpu",
    "lightning.pytorch.accelerators.cuda",
    "lightning.pytorch.accelerators.mps",
    "lightning.pytorch.accelerators.xla",
)
#: Names every module gets from ``typing`` and ``__future__``: not the module's own.
_NOISE = set(dir(typing)) | {"annotations", "Tensor", "nn", "torch", "np", "numpy", "log", "Path", "partial",
                             "contextmanager", "wraps", "dataclass", "field", "ABC", "abstractmethod", "override",
                             "deepcopy", "OrderedDict", "defaultdict", "Enum", "Mapping", "Sequence", "Iterable",
                             "Iterator", "Generator", "Callable", "MutableMapping", "timedelta", "datetime", "time"}


def public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(set(names))
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in _NOISE or inspect.ismodule(value):
            continue
        origin = getattr(value, "__module__", None) or ""
        if inspect.isclass(value) or inspect.isfunction(value):
            if not origin.startswith(("lightning", "torch")):
                continue  # a standard-library or third-party helper the module imported
        found.append(name)
    return sorted(found)


def defined_names(module: types.ModuleType) -> list[str]:
    """The public classes and functions ``module`` defines (a package: those of its own sub-modules), or its
    ``__all__``."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(set(names))
    home = module.__name__ + ("." if hasattr(module, "__path__") else "")
    return sorted(name for name, value in vars(module).items()
                  if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
                  and (getattr(value, "__module__", "") == module.__name__
                       or getattr(value, "__module__", "").startswith(home) and home.endswith(".")))


#: Trainer arguments whose effect on the Trainer's attributes (below) is recorded.
TRAINER_SCENARIOS = {
    "defaults": {},
    "fast_dev_run": {"fast_dev_run": True},
    "fast_dev_run_3": {"fast_dev_run": 3},
    "limits": {"limit_train_batches": 0.5, "limit_val_batches": 2, "limit_test_batches": 3,
               "limit_predict_batches": 0.25, "val_check_interval": 0.25, "log_every_n_steps": 7,
               "gradient_clip_val": 0.5, "gradient_clip_algorithm": "value", "num_sanity_val_steps": -1,
               "check_val_every_n_epoch": 2, "accumulate_grad_batches": 3},
    "overfit": {"overfit_batches": 2},
}
TRAINER_ATTRIBUTES = ("fast_dev_run", "limit_train_batches", "limit_val_batches", "limit_test_batches",
                      "limit_predict_batches", "overfit_batches", "val_check_interval", "check_val_every_n_epoch",
                      "num_sanity_val_steps", "log_every_n_steps", "gradient_clip_val", "gradient_clip_algorithm",
                      "accumulate_grad_batches")


def trainer_attributes(trainer_class: type) -> dict[str, dict[str, object]]:
    """Each scenario's Trainer attributes, as plain values (an enum as its value, infinity as "inf")."""
    out = {}
    for name, kwargs in TRAINER_SCENARIOS.items():
        trainer = trainer_class(accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, **kwargs)
        values: dict[str, object] = {}
        for attr in TRAINER_ATTRIBUTES:
            value = getattr(trainer, attr)
            value = getattr(value, "value", value)
            values[attr] = "inf" if value == float("inf") else value
        out[name] = values
    return out


def main() -> None:
    import lightning
    import lightning.pytorch

    record: dict[str, object] = {"lightning_version": lightning.__version__}
    for name in MODULES:
        module = importlib.import_module(name)
        record[name] = public_names(module)
    record["submodules"] = {name: defined_names(importlib.import_module(name)) for name in SUBMODULES}
    record["trainer_attributes"] = trainer_attributes(lightning.pytorch.Trainer)
    json.dump(record, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
