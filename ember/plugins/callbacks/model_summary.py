"""``callback.model-summary``: print the module's layers and parameter counts when ``fit`` starts.

On by default; ``Trainer(enable_model_summary=False)`` turns it off, ``ModelSummary(max_depth=2)`` in
``callbacks`` replaces the default one.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from ember.core.hooks.options import boolean
from ember.hookspecs import hookimpl


@attrs.frozen
class LayerRow:
    name: str
    type: str
    params: int
    mode: str


@attrs.frozen
class Summary:
    """What the table shows; ``str(summary)`` is the table."""

    rows: tuple[LayerRow, ...]
    trainable: int
    non_trainable: int
    size_bytes: int
    training_modules: int
    eval_modules: int

    @property
    def total(self) -> int:
        return self.trainable + self.non_trainable

    @property
    def size_mb(self) -> float:
        return self.size_bytes / 1e6

    def __str__(self) -> str:
        header = ("", "Name", "Type", "Params", "Mode")
        lines = [(str(i), r.name, r.type, human(r.params), r.mode) for i, r in enumerate(self.rows)]
        widths = [max(len(row[c]) for row in [header, *lines]) for c in range(len(header))]
        fmt = "  ".join(f"{{:<{w}}}" if c < 3 else f"{{:>{w}}}" for c, w in enumerate(widths))
        rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [fmt.format(*header), rule, *(fmt.format(*line) for line in lines), rule] if lines else []
        out += [f"{human(self.trainable):<8} Trainable params", f"{human(self.non_trainable):<8} Non-trainable params",
                f"{human(self.total):<8} Total params",
                f"{self.size_mb:<8.3f} Total estimated model params size (MB)",
                f"{self.training_modules:<8} Modules in train mode", f"{self.eval_modules:<8} Modules in eval mode"]
        return "\n".join(out)


def human(n: int) -> str:
    """``1234567`` -> ``"1.2 M"``."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def summarize(module: torch.nn.Module, max_depth: int = 1) -> Summary:
    """The layers of ``module`` up to ``max_depth`` levels deep (-1: all), and its parameter totals.
    Parameters shared between layers are counted once in the totals."""
    rows = []
    for name, sub in module.named_modules():
        if not name:
            continue
        depth = name.count(".") + 1
        if max_depth != -1 and depth > max_depth:
            continue
        rows.append(LayerRow(name, type(sub).__name__, sum(p.numel() for p in sub.parameters()),
                             "train" if sub.training else "eval"))
    params = {id(p): p for p in module.parameters()}.values()
    trainable = sum(p.numel() for p in params if p.requires_grad)
    non_trainable = sum(p.numel() for p in params if not p.requires_grad)
    size = sum(p.numel() * p.element_size() for p in params)
    modes = [m.training for m in module.modules()]
    return Summary(tuple(rows), trainable, non_trainable, size, sum(modes), len(modes) - sum(modes))


class ModelSummary:
    """Print a table of the module's layers (to ``max_depth``; 0 prints the totals only) and its trainable,
    non-trainable and total parameter counts with their size in MB, on global rank 0 at ``on_fit_start``."""

    identity = "callback.model-summary"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("enable_model_summary", type="bool", default=True, validate=boolean("enable_model_summary"),
                    switches="callback.model-summary", help="print a summary of the module when fit starts")

    def __init__(self, max_depth: int = 1) -> None:
        if max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth}): expected -1 (all), 0 (totals only) or more.")
        self.max_depth = max_depth
        self.summary: Summary | None = None

    @hookimpl
    def on_fit_start(self, trainer: Any, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        self.summary = summarize(module, self.max_depth)
        print(self.summary, flush=True)
