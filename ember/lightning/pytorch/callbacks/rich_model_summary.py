"""``RichModelSummary``: the model summary as a ``rich`` table."""

from __future__ import annotations

import importlib.util
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins.callbacks.model_summary import ModelSummary, human


class RichModelSummary(ModelSummary):
    """ember's ``ModelSummary`` (layers to ``max_depth``, parameter counts) printed with ``rich``; further
    keywords go to ``rich.console.Console``. Needs the ``rich`` package."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if importlib.util.find_spec("rich") is None:
            raise ModuleNotFoundError("RichModelSummary needs rich: pip install rich (or use ModelSummary).")
        super().__init__(max_depth=max_depth)
        self._console_kwargs = summarize_kwargs

    @hookimpl
    def on_fit_start(self, trainer: Any, module: Any) -> None:
        if not trainer.is_global_zero:
            return
        from rich.console import Console
        from rich.table import Table

        from ember.plugins.callbacks.model_summary import summarize

        self.summary = summary = summarize(module, self.max_depth)
        table = Table(header_style="bold magenta")
        for column in ("", "Name", "Type", "Params", "Mode"):
            table.add_column(column, justify="right" if column == "Params" else "left")
        for i, row in enumerate(summary.rows):
            table.add_row(str(i), row.name, row.type, human(row.params), row.mode)
        console = Console(**self._console_kwargs)
        if summary.rows:
            console.print(table)
        console.print(f"Trainable params: {human(summary.trainable)}\nNon-trainable params: "
                      f"{human(summary.non_trainable)}\nTotal params: {human(summary.total)}\nTotal estimated model "
                      f"params size (MB): {summary.size_mb:.3f}")


__all__ = ["RichModelSummary"]
