"""``profiler.torch``: ``torch.profiler`` over a run, written as a Chrome trace (``Trainer(profiler="torch")``).

The trace opens in https://ui.perfetto.dev or ``chrome://tracing``. ember's steps are labelled in it
(``ember.step``, ``ember.backward``, ``ember.zero_grad``, ``ember.optimizer_step``, ``ember.batch_to_device``),
and each profiled batch is a ``ProfilerStep#<n>`` span. By default, as is usual with ``torch.profiler``, it
records a few batches after a warm-up rather than the whole run: skip one, warm up on one, record three
(``schedule=(1, 1, 3)``); ``schedule=None`` records everything from ``setup`` to ``teardown``.

Files: ``<dir>/torch-trace-<fn>.json`` (the trace) and ``<dir>/torch-trace-<fn>.txt`` (torch's table of
operator times), where ``<dir>`` is ``dirpath``, else the first logger's version folder, else
``default_root_dir``. The batches that are stepped are the training batches in ``fit``, and the evaluation or
prediction batches in ``validate``, ``test`` and ``predict``.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Generator
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.plugins.profilers import output_path

#: ``torch.profiler.profile`` takes ``acc_events`` (torch 2.4 does not).
_ACCUMULATES = "acc_events" in inspect.signature(torch.profiler.profile.__init__).parameters


class TorchProfiler:
    """``torch.profiler`` as an ember plugin.

    :param dirpath: where to write (default: the first logger's version folder, else ``default_root_dir``).
    :param filename: the files' stem; ``-<fn>`` (and ``-rank<r>`` with several processes) is appended.
    :param schedule: ``(wait, warmup, active)`` batches, or None to record the whole run.
    :param activities: ``torch.profiler.ProfilerActivity`` values (default: CPU, and CUDA when the run is on a
        CUDA device).
    :param print_summary: print torch's operator table (``row_limit`` rows) on global rank 0 at the end.
    :param profiler_kwargs: passed to ``torch.profiler.profile`` (``record_shapes``, ``profile_memory``,
        ``with_stack``, ...); ``acc_events`` is True unless given (the run records one cycle).

    :attr:`path` is the trace written by the last run (None when nothing was recorded).
    """

    role = "profiler"
    identity = "profiler.torch"

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str = "torch-trace",
                 schedule: tuple[int, int, int] | None = (1, 1, 3), activities: list[Any] | None = None,
                 print_summary: bool = True, row_limit: int = 20, sort_by: str = "self_cpu_time_total",
                 **profiler_kwargs: Any) -> None:
        if schedule is not None and (len(schedule) != 3 or any(not isinstance(n, int) or n < 0 for n in schedule)
                                     or schedule[2] < 1):
            raise ValueError(f"TorchProfiler(schedule={schedule!r}): expected (wait, warmup, active) batches, "
                             "non-negative integers with active >= 1, or None to record the whole run.")
        self.dirpath = dirpath
        self.filename = filename
        self.schedule = schedule
        self.activities = activities
        self.print_summary = print_summary
        self.row_limit = row_limit
        self.sort_by = sort_by
        self.profiler_kwargs = profiler_kwargs
        self.path: str | None = None
        self._profiler: torch.profiler.profile | None = None
        self._trainer: Any = None
        self._exported = False

    # -- start, step, stop -----------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)
    def setup(self, trainer: Any) -> None:
        self._trainer = trainer
        self._exported = False
        self.path = None
        activities = self.activities
        if activities is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if trainer.root_device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
        schedule = None
        if self.schedule is not None:
            wait, warmup, active = self.schedule
            schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        kwargs = dict(self.profiler_kwargs)
        if _ACCUMULATES:
            # One recording cycle (the schedule does not repeat): keeping its events is what torch does anyway;
            # saying so spares the warning torch 2.10 and 2.11 give at every start (2.13 only at a second cycle).
            kwargs.setdefault("acc_events", True)
        self._profiler = torch.profiler.profile(activities=activities, schedule=schedule,
                                                on_trace_ready=self._export, **kwargs)
        self._profiler.start()

    def _step(self, trainer: Any) -> None:
        if self._profiler is not None:
            self._profiler.step()

    def on_train_batch_end(self, trainer: Any) -> None:
        self._step(trainer)

    def on_validation_batch_end(self, trainer: Any) -> None:
        if trainer.state.get("fn") == "validate":
            self._step(trainer)

    def on_test_batch_end(self, trainer: Any) -> None:
        self._step(trainer)

    def on_predict_batch_end(self, trainer: Any) -> None:
        self._step(trainer)

    @hookimpl(trylast=True)
    def teardown(self, trainer: Any) -> None:
        self._stop()

    @hookimpl
    def on_exception(self) -> None:
        self._stop()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        profiler.stop()
        if not self._exported:
            warnings.warn(f"profiler.torch recorded nothing: the run ended before the schedule's recorded "
                          f"batches {self.schedule} (wait, warmup, active); profile more batches, or pass "
                          "schedule=None to record the whole run.", stacklevel=2)

    def _export(self, profiler: torch.profiler.profile) -> None:
        trainer = self._trainer
        self.path = output_path(trainer, self.dirpath, self.filename, ".json")
        profiler.export_chrome_trace(self.path)
        table = profiler.key_averages().table(sort_by=self.sort_by, row_limit=self.row_limit)
        with open(self.path[:-5] + ".txt", "w", encoding="utf-8") as f:
            f.write(table + "\n")
        self._exported = True
        if self.print_summary and trainer.is_global_zero:
            print(f"profiler.torch: trace written to {self.path}\n{table}", file=sys.stdout, flush=True)

    # -- labels in the trace ---------------------------------------------------------------------------------
    @hookimpl(wrapper=True)
    def step(self, stage: str) -> Generator[None, Any, Any]:
        with torch.profiler.record_function(f"ember.step[{stage}]"):
            return (yield)

    @hookimpl(wrapper=True)
    def backward(self) -> Generator[None, Any, Any]:
        with torch.profiler.record_function("ember.backward"):
            return (yield)

    @hookimpl(wrapper=True)
    def zero_grad(self) -> Generator[None, Any, Any]:
        with torch.profiler.record_function("ember.zero_grad"):
            return (yield)

    @hookimpl(wrapper=True)
    def optimizer_step(self) -> Generator[None, Any, Any]:
        with torch.profiler.record_function("ember.optimizer_step"):
            return (yield)

    @hookimpl(wrapper=True)
    def batch_to_device(self) -> Generator[None, Any, Any]:
        with torch.profiler.record_function("ember.batch_to_device"):
            return (yield)
