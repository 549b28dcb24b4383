"""``SimpleProfiler``: the time of every hook call, as Lightning's table (mean, calls, total, share of the run)."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any

from ember.lightning.pytorch.profilers.profiler import Profiler


class SimpleProfiler(Profiler):
    """Record each action's durations; :meth:`summary` is a table sorted by total time. ``extended=False`` leaves
    out the calls and share columns. ``recorded_durations`` maps each action to its list of durations (seconds).
    ember's own ``profiler.simple`` (``Trainer(profiler="simple")``) adds the phases of the run."""

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.current_actions: dict[str, list[float]] = {}
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self.extended = extended
        self.start_time = time.monotonic()

    def start(self, action_name: str) -> None:
        self.current_actions.setdefault(action_name, []).append(time.monotonic())

    def stop(self, action_name: str) -> None:
        starts = self.current_actions.get(action_name)
        if not starts:
            raise ValueError(f"SimpleProfiler.stop({action_name!r}): the action was never started.")
        self.recorded_durations[action_name].append(time.monotonic() - starts.pop())
        if not starts:
            del self.current_actions[action_name]

    def summary(self) -> str:
        total = time.monotonic() - self.start_time
        rows = sorted(((name, sum(d) / len(d), len(d), sum(d)) for name, d in self.recorded_durations.items() if d),
                      key=lambda r: r[3], reverse=True)
        if not rows:
            return ""
        width = max(len("Action"), *(len(r[0]) for r in rows))
        if self.extended:
            head = f"{'Action':<{width}}  {'Mean duration (s)':>18}  {'Num calls':>10}  {'Total time (s)':>15}  {'Percentage %':>13}"
            lines = [f"{n:<{width}}  {m:>18.5f}  {c:>10d}  {t:>15.5f}  {100 * t / total if total else 0:>13.3f}"
                     for n, m, c, t in rows]
            lines.insert(0, f"{'Total':<{width}}  {'-':>18}  {sum(r[2] for r in rows):>10d}  {total:>15.5f}  {100:>13.3f}")
        else:
            head = f"{'Action':<{width}}  {'Mean duration (s)':>18}  {'Total time (s)':>15}"
            lines = [f"{n:<{width}}  {m:>18.5f}  {t:>15.5f}" for n, m, _, t in rows]
        rule = "-" * len(head)
        return "\n".join(["Profiler Report", rule, head, rule, *lines, rule, ""])

    def _reset(self) -> Any:
        self.recorded_durations = defaultdict(list)
        self.start_time = time.monotonic()


__all__ = ["SimpleProfiler"]
