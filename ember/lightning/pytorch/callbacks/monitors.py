"""``DeviceStatsMonitor``, ``ThroughputMonitor`` and ``SpikeDetection``: watch a fit as it runs."""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from ember.core.api.callback import Callback
from ember.core.errors import ConfigurationError


def _cpu_stats() -> dict[str, float]:
    import psutil

    return {"cpu_vm_percent": psutil.virtual_memory().percent, "cpu_percent": psutil.cpu_percent(),
            "cpu_swap_percent": psutil.swap_memory().percent}


def _own_stats(trainer: Any) -> Callable[[torch.device], dict[str, Any]] | None:
    """The ``get_device_stats`` of the run's accelerator when it is a Lightning ``Accelerator``, else None."""
    from ember.lightning.pytorch.accelerators import Accelerator

    accelerator = trainer.accelerator
    return accelerator.get_device_stats if isinstance(accelerator, Accelerator) else None


def _psutil_stats(get_device_stats: Any) -> bool:
    from ember.lightning.pytorch.accelerators import CPUAccelerator

    return getattr(get_device_stats, "__func__", None) is CPUAccelerator.get_device_stats


class DeviceStatsMonitor(Callback):
    """Log the accelerator's statistics at the start and end of each training, validation and test batch, as
    ``DeviceStatsMonitor.on_train_batch_start/<stat>``: ``torch.cuda.memory_stats()`` on CUDA, and the CPU's use
    (``psutil``) on the CPU or with ``cpu_stats=True`` (``False``: never). With a Lightning ``Accelerator``
    (:mod:`ember.lightning.pytorch.accelerators`), its ``get_device_stats(device)`` gives them, as in Lightning.
    Needs a logger."""

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise ConfigurationError("DeviceStatsMonitor needs a logger: pass Trainer(logger=...).")
        own = _own_stats(trainer)
        if own is not None and not _psutil_stats(own) and not (self._cpu_stats and trainer.root_device.type != "cpu"):
            return  # the accelerator's own get_device_stats answers
        if self._cpu_stats or (self._cpu_stats is None and trainer.root_device.type == "cpu"):
            try:
                import psutil  # noqa: F401
            except ImportError as exc:
                raise ModuleNotFoundError("DeviceStatsMonitor logs CPU statistics with psutil: pip install psutil, "
                                          "or pass cpu_stats=False.") from exc

    def _log(self, trainer: Any, key: str) -> None:
        if trainer.sanity_checking:
            return
        device = trainer.root_device
        stats: dict[str, float] = {}
        own = _own_stats(trainer)
        if own is not None:  # a Lightning Accelerator (ember.lightning.pytorch.accelerators): its method, as there
            if self._cpu_stats is False and device.type == "cpu":
                return
            stats.update(own(device))
            if self._cpu_stats and device.type != "cpu":
                stats.update(_cpu_stats())
        else:
            if device.type == "cuda":
                stats.update({k: float(v) for k, v in torch.cuda.memory_stats(device).items()
                              if isinstance(v, (int, float))})
            if self._cpu_stats or (self._cpu_stats is None and device.type == "cpu"):
                stats.update(_cpu_stats())
        for name, value in stats.items():
            trainer.log(f"{type(self).__name__}.{key}/{name}", float(value), on_step=True, on_epoch=False)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_end")

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._log(trainer, "on_validation_batch_start")

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._log(trainer, "on_validation_batch_end")

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._log(trainer, "on_test_batch_start")

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._log(trainer, "on_test_batch_end")


class ThroughputMonitor(Callback):
    """Log the training throughput over a moving window of ``window_size`` batches: ``train/time``,
    ``train/batches``, ``train/samples`` and, once the window is full, ``train/device/batches_per_sec`` and
    ``train/device/samples_per_sec`` (``/`` is ``separator``). ``batch_size_fn(batch)`` gives a batch's number of
    samples; ``length_fn(batch)`` its number of items (tokens), which adds ``items_per_sec``."""

    def __init__(self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None,
                 window_size: int = 100, separator: str = "/") -> None:
        if window_size < 2:
            raise ValueError(f"ThroughputMonitor(window_size={window_size}): expected >= 2.")
        self.batch_size_fn, self.length_fn = batch_size_fn, length_fn
        self.window_size, self.separator = window_size, separator
        self._reset()

    def _reset(self) -> None:
        self._start = time.perf_counter()
        self._samples = self._items = self._batches = 0
        self._window: deque[tuple[float, int, int, int]] = deque(maxlen=self.window_size)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._reset()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.root_device)
        now = time.perf_counter() - self._start
        self._batches += 1
        self._samples += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            self._items += int(self.length_fn(batch))
        self._window.append((now, self._batches, self._samples, self._items))
        s = self.separator
        metrics = {f"train{s}time": now, f"train{s}batches": float(self._batches),
                   f"train{s}samples": float(self._samples)}
        if len(self._window) == self.window_size:
            t0, b0, n0, i0 = self._window[0]
            elapsed = now - t0
            if elapsed > 0:
                metrics[f"train{s}device{s}batches_per_sec"] = (self._batches - b0) / elapsed
                metrics[f"train{s}device{s}samples_per_sec"] = (self._samples - n0) / elapsed
                if self.length_fn is not None:
                    metrics[f"train{s}device{s}items_per_sec"] = (self._items - i0) / elapsed
        for name, value in metrics.items():
            trainer.log(name, value, on_step=True, on_epoch=False)


class TrainingSpikeException(RuntimeError):
    """The loss of a batch spiked (:class:`SpikeDetection`)."""

    def __init__(self, batch_idx: int, *args: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args)
        self.batch_idx = batch_idx


class SpikeDetection(Callback):
    """Stop the fit with :class:`TrainingSpikeException` when a batch's loss spikes: it moved the wrong way since
    the last batch (up with ``mode="min"``, down with ``"max"``) and differs from the running mean of the last
    ``window`` losses by at least ``atol`` and at least ``rtol`` times that mean (None: that test passes);
    batches before ``warmup`` are not checked. A non-finite loss is a spike with ``finite_only``. The spiking
    batch and the one before it are added to the JSON list ``exclude_batches_path`` (a ``.json`` file, or a folder
    for ``skip_batches.json``; default the working directory), so a rerun can skip them."""

    def __init__(self, mode: str = "min", window: int = 10, warmup: int = 1, atol: float | None = None,
                 rtol: float | None = 2.0, exclude_batches_path: str | os.PathLike | None = None,
                 finite_only: bool = True) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"SpikeDetection(mode={mode!r}): expected 'min' or 'max'.")
        self.mode, self.window, self.warmup = mode, window, warmup
        self.atol, self.rtol = atol, rtol
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only
        self.bad_batches: list[int] = []
        self.last_val = 0.0
        self._losses: deque[float] = deque(maxlen=window)

    def _is_spike(self, loss: float) -> bool:
        if not math.isfinite(loss) and self.finite_only:
            return True
        # without finite_only, a non-finite loss takes the usual test: +inf is a spike (mode "min"), NaN never is
        change = loss - self.last_val
        if (self.mode == "min" and change <= 0) or (self.mode == "max" and change >= 0) or not self._losses:
            return False
        mean = sum(self._losses) / len(self._losses)
        return (self.atol is None or abs(loss - mean) >= abs(self.atol)) and \
            (self.rtol is None or abs(loss - mean) >= abs(self.rtol * mean))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        value = float(loss.detach())
        spike = trainer.reduce_boolean_decision(batch_idx >= self.warmup and self._is_spike(value), all=False)
        if not spike:
            if math.isfinite(value):
                self._losses.append(value)
                self.last_val = value
            return
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        if trainer.is_global_zero:
            path = os.fspath(self.exclude_batches_path or os.getcwd())
            path = path if path.endswith(".json") else os.path.join(path, "skip_batches.json")
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.bad_batches, f, indent=4)
        raise TrainingSpikeException(batch_idx)


__all__ = ["DeviceStatsMonitor", "SpikeDetection", "ThroughputMonitor", "TrainingSpikeException"]
