"""``AdvancedProfiler``: ``cProfile`` statistics for every action (hook), the functions that took the time."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from pathlib import Path

from ember.core.hooks.positional import base_hook
from ember.lightning.pytorch.profilers.profiler import Profiler


class AdvancedProfiler(Profiler):
    """One ``cProfile.Profile`` per action, enabled while it runs. :meth:`summary` gives each action's statistics
    sorted by cumulative time, cut to ``line_count_restriction`` (a fraction, or a number of lines); with
    ``dump_stats`` each action's raw statistics go to ``<dirpath>/<stage>-<filename>-<action>.prof`` too."""

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0, dump_stats: bool = False) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.profiled_actions: dict[str, cProfile.Profile] = {}
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats

    def start(self, action_name: str) -> None:
        profile = self.profiled_actions.setdefault(action_name, cProfile.Profile())
        try:
            profile.enable()
        except ValueError:  # another profiler (an outer action) is active: Python allows one at a time
            self.profiled_actions.setdefault(f"{action_name} (nested)", cProfile.Profile())

    def stop(self, action_name: str) -> None:
        profile = self.profiled_actions.get(action_name)
        if profile is None:
            raise ValueError(f"AdvancedProfiler.stop({action_name!r}): the action was never started.")
        profile.disable()

    def summary(self) -> str:
        parts = []
        for action, profile in self.profiled_actions.items():
            if self.dump_stats and self.dirpath:
                Path(self.dirpath).mkdir(parents=True, exist_ok=True)
                profile.dump_stats(os.path.join(os.fspath(self.dirpath),
                                                self._prepare_filename(action, extension=".prof")))
            stream = io.StringIO()
            try:
                pstats.Stats(profile, stream=stream).strip_dirs().sort_stats("cumulative").print_stats(
                    self.line_count_restriction)
            except TypeError:  # no calls recorded for this action
                continue
            parts.append(f"Profile stats for: {action}\n{stream.getvalue()}")
        return "\n".join(parts)

    @base_hook  # Lightning's method, not ember's teardown hook (describe() calls it)
    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        self.profiled_actions = {}


__all__ = ["AdvancedProfiler"]
