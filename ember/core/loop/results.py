"""What ``self.log`` records, and how epoch values are reduced.

Values stay on their device: logging a tensor appends a reference (and folds the list every few hundred
entries), so a step costs no host-device synchronisation. A value is read to the host only when something
displays or writes it (a logger, the progress bar, the value returned by ``validate``/``test``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

import torch

_FOLD_EVERY = 256
_REDUCE = {"mean", "sum", "max", "min"}
_ALIASES = {"avg": "mean", "average": "mean", torch.mean: "mean", torch.sum: "sum", torch.max: "max",
            torch.min: "min", "std": None}


class MetricEntry:
    """One logged name within a run of a stage: its options and the values seen this epoch."""

    __slots__ = ("name", "on_step", "on_epoch", "prog_bar", "logger", "reduce_fx", "sync_dist",
                 "values", "weights", "partial", "partial_weight", "last", "metric", "epoch_value",
                 "serial", "step_key", "epoch_key", "dataloader_idx")

    def __init__(self, name: str, on_step: bool, on_epoch: bool, prog_bar: bool, logger: bool,
                 reduce_fx: str | Callable, sync_dist: bool) -> None:
        self.name = name
        self.on_step = on_step
        self.on_epoch = on_epoch
        # the names its values are published under (``loss_step``/``loss_epoch`` when logged both ways)
        # (a dataloader suffix stays last: ``loss_epoch/dataloader_idx_1``, as in Lightning)
        base, sep, idx = name.partition("/dataloader_idx_")
        self.step_key = f"{base}_step{sep}{idx}" if on_epoch else name
        self.epoch_key = f"{base}_epoch{sep}{idx}" if on_step else name
        #: the evaluation dataloader of a name logged with ``add_dataloader_idx=False`` under several loaders
        self.dataloader_idx: int | None = None
        self.prog_bar = prog_bar
        self.logger = logger
        self.reduce_fx = reduce_fx
        self.sync_dist = sync_dist
        self.values: list[torch.Tensor] = []
        self.weights: list[float] = []
        self.partial: torch.Tensor | None = None
        self.partial_weight = 0.0
        self.last: Any = None
        self.metric: Any = None  # a torchmetrics Metric, when one was logged under this name
        self.epoch_value: torch.Tensor | None = None
        self.serial = -1  # which training batch last logged a value (step metrics hold only fresh values)

    def add_metric(self, metric: Any) -> None:
        """A torchmetrics ``Metric`` was logged: its step value is what its last ``forward`` returned (None
        after a bare ``update``); its epoch value is ``compute()`` at the end of the epoch, then it is reset."""
        self.metric = metric
        cache = getattr(metric, "_forward_cache", None)
        self.last = _scalar(self.name, cache, "its last forward()") if isinstance(cache, torch.Tensor) else None

    def add(self, value: torch.Tensor, weight: float) -> None:
        """A value for the epoch (the caller sets ``last``)."""
        self.values.append(value)
        self.weights.append(weight)
        if len(self.values) >= _FOLD_EVERY and not callable(self.reduce_fx):
            self._fold()

    def _fold(self) -> None:
        values = self.values
        dtype = values[0].dtype
        if all(v.ndim == 0 and v.dtype == dtype for v in values):  # the usual case: one stack, one conversion
            stacked = torch.stack(values).to(torch.float64)
        else:  # a stack would promote mixed dtypes before widening them
            stacked = torch.stack([v.detach().to(torch.float64).reshape(()) for v in values])
        fx = self.reduce_fx
        if fx == "mean":
            first = self.weights[0]
            if all(w == first for w in self.weights):  # the usual case: no weights tensor to copy to the device
                value = stacked.sum() * first
            else:  # a non-blocking copy: folding must not wait for the device
                w = torch.tensor(self.weights, dtype=torch.float64).to(stacked.device, non_blocking=True)
                value = (stacked * w).sum()
        elif fx == "sum":
            value = stacked.sum()
        elif fx == "max":
            value = stacked.max()
        else:
            value = stacked.min()
        if self.partial is not None:
            if fx in ("mean", "sum"):
                value = value + self.partial
            elif fx == "max":
                value = torch.maximum(value, self.partial)
            else:
                value = torch.minimum(value, self.partial)
        self.partial = value
        self.partial_weight += sum(self.weights)
        self.values.clear()
        self.weights.clear()

    @property
    def has_epoch_values(self) -> bool:
        """Something was logged under this name since the epoch began (a torchmetrics object: always)."""
        return bool(self.values) or self.partial is not None or self.epoch_value is not None or \
            self.metric is not None

    def compute(self) -> torch.Tensor | None:
        """The epoch value (None when nothing was logged this epoch)."""
        if self.metric is not None:
            if self.epoch_value is None and self.on_epoch:
                self.epoch_value = _scalar(self.name, self.metric.compute(), "compute()").float()
                self.metric.reset()
            return self.epoch_value
        if callable(self.reduce_fx):
            if not self.values:
                return None
            return self.reduce_fx(torch.stack([torch.as_tensor(v).detach().float().reshape(()) for v in self.values]))
        if self.values:
            self._fold()
        if self.partial is None:
            return None
        value = self.partial / self.partial_weight if self.reduce_fx == "mean" else self.partial
        return value.to(torch.float32)

    def reset(self) -> None:
        self.values.clear()
        self.weights.clear()
        self.partial = None
        self.partial_weight = 0.0
        self.last = None
        self.epoch_value = None
        if self.metric is not None:
            self.metric.reset()


def _scalar(name: str, value: Any, where: str) -> torch.Tensor:
    value = torch.as_tensor(value)
    if value.numel() != 1:
        raise ValueError(f"self.log({name!r}, metric): the metric's {where} gave a tensor of shape "
                         f"{tuple(value.shape)}; log a metric that computes a single number (e.g. average='macro').")
    return value.detach().reshape(())


def to_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"self.log({name!r}, ...) needs a single number, got a tensor of shape "
                             f"{tuple(value.shape)}; reduce it first (e.g. .mean()).")
        return value.detach().reshape(())  # a one-element tensor of any shape is kept as a scalar (Lightning)
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return torch.tensor(float(value))  # type: ignore[arg-type]  # a real number
    if hasattr(value, "compute") and hasattr(value, "update"):  # a torchmetrics Metric
        return value
    raise ValueError(f"`self.log({name}, {value})` was called with a {type(value).__name__}: expected a number or a "
                     "one-element tensor.")


def _wide(value: torch.Tensor) -> torch.Tensor:
    value = value.detach().reshape(())
    return value.double() if value.device.type == "cpu" else value.float()


def to_floats(values: dict[str, Any]) -> dict[str, float]:
    """Read logged values to the host with one synchronisation (one stack per device)."""
    out: dict[str, float] = {}
    by_device: dict[Any, list[str]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(name)
        else:
            out[name] = float(value)
    for names in by_device.values():
        tensors = [values[n] for n in names]
        if all(v.ndim == 0 and v.dtype == torch.float32 for v in tensors):  # the usual case, read as it is
            floats = torch.stack(tensors).tolist() if len(tensors) > 1 else [tensors[0].tolist()]  # 0-d: a float
        else:  # float64 where the device has it (the host), float32 elsewhere (MPS has no float64)
            floats = torch.stack([_wide(v) for v in tensors]).tolist()
        out.update(zip(names, floats, strict=True))
    return {name: out[name] for name in values}


def check_reduce_fx(name: str, reduce_fx: Any) -> str | Callable:
    fx = _ALIASES.get(reduce_fx, reduce_fx) if not isinstance(reduce_fx, str) else reduce_fx.lower()
    fx = _ALIASES.get(fx, fx)
    if fx in _REDUCE or (callable(fx) and not isinstance(fx, str)):
        return fx
    raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): expected one of 'mean', 'sum', 'max', "
                     "'min' or a callable taking a 1-D tensor of the epoch's values.")


class Results:
    """The entries logged during one run of one stage (``"train"``, ``"validate"``, ``"test"``)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.entries: dict[str, MetricEntry] = {}

    def reset(self) -> None:
        for entry in self.entries.values():
            entry.reset()

    def state_dict(self) -> dict[str, Any]:
        """The epoch accumulators, so that epoch metrics survive a mid-epoch resume. An entry with a callable
        reduction or a torchmetrics object is left out: it restarts with the resumed epoch."""
        out: dict[str, Any] = {}
        for key, e in self.entries.items():
            if not e.on_epoch or callable(e.reduce_fx) or e.metric is not None \
                    or not all(isinstance(v, torch.Tensor) for v in e.values):
                continue
            out[key] = {"on_step": e.on_step, "on_epoch": e.on_epoch, "prog_bar": e.prog_bar, "logger": e.logger,
                        "reduce_fx": e.reduce_fx, "sync_dist": e.sync_dist, "values": list(e.values),
                        "weights": list(e.weights), "partial": e.partial, "partial_weight": e.partial_weight}
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, s in state.items():
            entry = MetricEntry(key, s["on_step"], s["on_epoch"], s["prog_bar"], s["logger"], s["reduce_fx"],
                                s["sync_dist"])
            entry.values, entry.weights = list(s["values"]), list(s["weights"])
            entry.partial, entry.partial_weight = s["partial"], s["partial_weight"]
            self.entries[key] = entry

    def epoch_values(self) -> dict[str, tuple[MetricEntry, torch.Tensor]]:
        """Each epoch-level entry's value; metrics logged per step only are reset here too."""
        out = {}
        for key, entry in self.entries.items():
            if entry.metric is not None and not entry.on_epoch:
                entry.metric.reset()
            if entry.on_epoch:
                value = entry.compute()
                if value is not None:
                    out[key] = (entry, value)
        return out
