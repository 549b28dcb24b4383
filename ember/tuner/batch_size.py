"""The batch-size finder: the largest batch size whose trial steps fit in memory (or in a memory budget)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.tuner._trial import restored, trial_trainer

log = logging.getLogger("ember")


class OverBudget(RuntimeError):
    """A trial's peak device memory went over ``max_memory``."""


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation failure of any device: torch's ``OutOfMemoryError`` or the allocator's RuntimeError text."""
    if isinstance(exc, (torch.OutOfMemoryError, OverBudget)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("out of memory", "DefaultCPUAllocator: can't allocate memory",
                                      "CUDNN_STATUS_NOT_SUPPORTED", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))


def scale_batch_size(trainer: Any, model: torch.nn.Module, train_dataloaders: Any = None, datamodule: Any = None,
                     mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                     batch_arg_name: str = "batch_size", margin: float = 0.05, max_val: int = 8192,
                     max_memory: int | None = None) -> int:
    """Find the batch size (see :meth:`ember.tuner.Tuner.scale_batch_size`)."""
    if not 0.0 <= margin < 1.0:
        raise ConfigurationError(f"scale_batch_size(margin={margin!r}) is invalid: expected a float in [0, 1).")
    if mode not in ("power", "binsearch", "binary"):
        raise ConfigurationError(f"scale_batch_size(mode={mode!r}) is invalid: expected 'power' or 'binsearch'.")
    if train_dataloaders is not None:
        raise ConfigurationError(
            "scale_batch_size() cannot change the batch size of a DataLoader that is already built: define "
            f"train_dataloader() on the model or a DataModule that reads self.{batch_arg_name}, and pass that.")
    for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials),
                        ("max_val", max_val)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"scale_batch_size({name}={value!r}) is invalid: expected an int >= 1.")
    owner = _owner(model, datamodule, batch_arg_name)
    with restored(model, datamodule):
        found = _search(trainer, model, datamodule, owner, batch_arg_name, mode, steps_per_trial, init_val,
                        max_trials, max_val, max_memory)
    if mode != "power" and margin > 0:  # Lightning's safety margin, for the bisected size only
        found = max(1, int(found * (1 - margin)))
    _set(owner, batch_arg_name, found)
    return found


def _search(trainer: Any, model: Any, datamodule: Any, owner: Any, name: str, mode: str, steps: int, size: int,
            max_trials: int, max_val: int, max_memory: int | None) -> int:
    good, bad = 0, None
    for _ in range(max_trials):
        _set(owner, name, size)
        ok, whole = _trial(trainer, model, datamodule, steps, max_memory)
        log.info("batch size %d: %s", size, "fits" if ok else "out of memory")
        if ok:
            good = size
            if whole or good >= max_val:  # one batch holds the whole training set, or the cap is reached
                break
            size = min(size * 2, max_val) if bad is None else (good + bad) // 2
        else:
            bad = size
            if mode == "power":
                break
            size = (good + bad) // 2
        if bad is not None and (bad - good <= 1 or size <= good):
            break
    if good == 0:
        raise ConfigurationError(f"scale_batch_size(): even {name}={size} ran out of memory; lower init_val or the "
                                 "model's size.")
    return good


def _trial(trainer: Any, model: Any, datamodule: Any, steps: int, max_memory: int | None) -> tuple[bool, bool]:
    trial = trial_trainer(trainer, [], max_steps=steps, max_epochs=None)
    try:
        if max_memory is not None:
            _reset_peak(trial)
        trial.fit(model, datamodule=datamodule)
        if max_memory is not None and _peak(trial) > max_memory:
            raise OverBudget(f"peak memory {_peak(trial)} bytes is over max_memory={max_memory}")
    except BaseException as exc:
        if not is_out_of_memory(exc):
            raise
        del exc
        _free()
        return False, False
    if torch.cuda.is_available():  # the next, larger trial measures CUDA memory: free what this one left
        _free()
    return True, trial.num_training_batches == 1


def _device(trial: Any) -> torch.device:
    accelerator = trial.config.accelerator
    if accelerator in ("cuda", "gpu") or accelerator == "auto" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    raise ConfigurationError("scale_batch_size(max_memory=...) measures CUDA memory; it needs "
                             "Trainer(accelerator='cuda'). On the CPU, the search stops at an allocation failure.")


def _reset_peak(trial: Any) -> None:
    torch.cuda.reset_peak_memory_stats(_device(trial))


def _peak(trial: Any) -> int:
    return int(torch.cuda.max_memory_allocated(_device(trial)))


def _free() -> None:
    """Release what the failed trial held. The collection also finalises other code's garbage: an unclosed file
    left by anything earlier in the process warns (ResourceWarning) here, which under ``-W error`` would stop the
    search for a reason that is not the tuner's; those warnings are not given from this collection."""
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _owner(model: Any, datamodule: Any, name: str) -> Any:
    for obj in (datamodule, model):
        if obj is None:
            continue
        hparams = obj.__dict__.get("_hparams") or {}
        if name in vars(obj) or name in hparams:
            return obj
    where = "the DataModule or the model" if datamodule is not None else "the model"
    raise ConfigurationError(f"scale_batch_size() found no {name!r} attribute (or hparams entry) on {where}; "
                             f"set self.{name} in __init__ and build the DataLoader from it in train_dataloader(), "
                             "or pass batch_arg_name=....")


def _set(owner: Any, name: str, value: int) -> None:
    if name in vars(owner):
        setattr(owner, name, value)
    hparams = owner.__dict__.get("_hparams")
    if isinstance(hparams, dict) and name in hparams:
        hparams[name] = value
