"""``PyTorchProfiler``: ``torch.profiler`` over the run, ember's ``profiler.torch`` with Lightning's arguments."""

from __future__ import annotations

import os
from typing import Any

from ember.lightning._names import UnsupportedError
from ember.plugins.profilers.torch_profiler import TorchProfiler


class PyTorchProfiler(TorchProfiler):
    """``torch.profiler`` over the training steps, written as a Chrome trace (``export_to_chrome``) and
    summarised as a table of ``row_limit`` rows sorted by ``sort_by_key``; ``group_by_input_shapes`` records
    shapes. Further keywords go to ``torch.profiler.profile``. See ember's ``profiler.torch`` for where the files
    go and which steps are recorded."""

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 group_by_input_shapes: bool = False, emit_nvtx: bool = False, export_to_chrome: bool = True,
                 row_limit: int = 20, sort_by_key: str | None = None, record_module_names: bool = True,
                 table_kwargs: dict[str, Any] | None = None, **profiler_kwargs: Any) -> None:
        if emit_nvtx:
            raise UnsupportedError("PyTorchProfiler(emit_nvtx=True) is not supported by ember: run under "
                                   "`nsys profile` with torch.autograd.profiler.emit_nvtx() in your own code, or "
                                   "use the Chrome trace.")
        if group_by_input_shapes:
            profiler_kwargs.setdefault("record_shapes", True)
        schedule = profiler_kwargs.pop("schedule", (1, 1, 3))
        if callable(schedule):  # a torch.profiler.schedule(...) object: ember takes (wait, warmup, active)
            schedule = (getattr(schedule, "wait", 1), getattr(schedule, "warmup", 1), getattr(schedule, "active", 3)) \
                if hasattr(schedule, "active") else None
        super().__init__(dirpath=dirpath, filename=filename or "torch-trace", schedule=schedule,
                         row_limit=row_limit, sort_by=sort_by_key or "self_cpu_time_total", **profiler_kwargs)
        self.export_to_chrome = export_to_chrome
        self.record_module_names = record_module_names
        self.table_kwargs = table_kwargs or {}


__all__ = ["PyTorchProfiler"]
