"""``lightning.pytorch.profilers.Profiler``: the base of a profiler, driven by ember's hook calls.

A subclass defines ``start(action_name)``, ``stop(action_name)`` and ``summary()``. Passed in
``Trainer(profiler=...)``, it is started and stopped around every hook call the loop makes (action names are
the hook names: ``"on_train_batch_start"``, ``"training_step"``, ``"backward"``, ...), and ``describe()`` prints
its ``summary()`` (and writes it to ``<dirpath>/<stage>-<filename>.txt`` when ``filename`` is given) at the end
of each run. ``with profiler.profile("name"):`` times a block of your own code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Any

from ember.core.api.trainer_properties import NoProfiler
from ember.core.hooks.positional import base_hook
from ember.hookspecs import hookimpl

log = logging.getLogger("ember")


class Profiler(ABC):
    """The base of Lightning-style profilers (see the module's doc)."""

    role = "profiler"

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None) -> None:
        self.dirpath = dirpath
        self.filename = filename
        self._output_file: Any = None
        self._write_stream: Callable[[str], Any] | None = None
        self._stage: str | None = None
        self._local_rank: int | None = None
        self._undo: Callable[[], None] | None = None

    @abstractmethod
    def start(self, action_name: str) -> None:
        """An action starts."""

    @abstractmethod
    def stop(self, action_name: str) -> None:
        """The action ends."""

    def summary(self) -> str:
        """The report (the default is empty)."""
        return ""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Generator[None, None, None]:
        """Time the block as ``action_name``."""
        try:
            self.start(action_name)
            yield
        finally:
            self.stop(action_name)

    @base_hook  # Lightning's method, not ember's setup hook (the profiler calls it itself)
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """The run ``stage`` starts (the folder defaults to ``log_dir``)."""
        self._stage, self._local_rank = stage, local_rank
        self.dirpath = self.dirpath or log_dir

    @base_hook  # Lightning's method, not ember's teardown hook (describe() calls it)
    def teardown(self, stage: str | None) -> None:
        """The run ends: the output file is closed."""
        if self._output_file is not None:
            self._output_file.close()
            self._output_file = None
        self._write_stream = None

    def _prepare_filename(self, action_name: str | None = None, extension: str = ".txt", split_token: str = "-") -> str:
        parts = [p for p in (self._stage, self.filename, action_name) if p]
        if self._local_rank is not None and self._local_rank > 0:
            parts.append(str(self._local_rank))
        return split_token.join(parts) + extension

    def _prepare_streams(self) -> None:
        if self._write_stream is not None:
            return
        if self.filename and self.dirpath:
            os.makedirs(self.dirpath, exist_ok=True)
            self._output_file = open(os.path.join(os.fspath(self.dirpath), self._prepare_filename()), "a",
                                     encoding="utf-8")
            self._write_stream = self._output_file.write
        else:
            self._write_stream = lambda text: log.info("%s", text)

    def describe(self) -> None:
        """Write :meth:`summary` (to the file, else the ``ember`` log)."""
        self._prepare_streams()
        text = self.summary()
        if text and self._write_stream is not None:
            self._write_stream(text)
        if self._output_file is not None:
            self._output_file.flush()
        self.teardown(stage=self._stage)

    # -- ember's hooks ------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True, specname="configure")
    def _ember_configure(self, trainer: Any) -> None:
        if self._undo is not None:
            self._undo()
        self.setup(trainer.state.fn or "fit", trainer.local_rank, trainer.log_dir)
        self._undo = trainer.plugin_manager.add_hookcall_monitoring(self._ember_before, self._ember_after)

    def _ember_before(self, hook_name: str, hook_impls: Any, kwargs: Any) -> None:
        self.start(f"[Hook]{hook_name}" if hook_name.startswith("on_") else hook_name)

    def _ember_after(self, outcome: Any, hook_name: str, hook_impls: Any, kwargs: Any) -> None:
        self.stop(f"[Hook]{hook_name}" if hook_name.startswith("on_") else hook_name)
        if hook_name == "teardown":
            self._ember_finish()

    def _ember_finish(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
        self.describe()

    @hookimpl(specname="teardown")
    def _ember_teardown(self) -> None:
        """Implemented so that the loop calls ``teardown`` (the monitoring sees it and ends the report)."""
        return None

    @hookimpl(specname="on_exception")
    def _ember_on_exception(self, trainer: Any) -> None:
        if not trainer.state.get("setup_done"):  # no teardown follows
            self._ember_finish()


def _timed_event(self: Any) -> None:
    """An event a profiler implements only so that the loop calls it (and the monitoring times it)."""


#: The events a profiler makes the loop call, so that each run's stages, epochs and batches show as actions.
TIMED_EVENTS = tuple(f"on_{stage}_{what}" for stage in ("train", "validation", "test", "predict")
                     for what in ("start", "end", "epoch_start", "epoch_end", "batch_start", "batch_end")) + \
    ("on_sanity_check_start", "on_sanity_check_end", "on_fit_start", "on_fit_end")
for _event in TIMED_EVENTS:  # one function object each: pluggy keeps its options on the function
    _copy = types.FunctionType(_timed_event.__code__, globals(), f"_ember_timed_{_event}")
    setattr(Profiler, f"_ember_timed_{_event}", hookimpl(specname=_event)(_copy))


class PassThroughProfiler(Profiler):
    """A profiler that records nothing."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass


__all__ = ["PassThroughProfiler", "Profiler"]


PassThroughProfiler.register(NoProfiler)  # trainer.profiler without a profiler is a PassThroughProfiler too
