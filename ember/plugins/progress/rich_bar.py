"""``progress.rich``: progress bars drawn with rich (``pip install 'ember[rich]'``)."""

from __future__ import annotations

from typing import Any, TextIO

from ember.plugins._shared import packages
from ember.plugins.progress import ProgressBar, _fmt


class RichProgressBar(ProgressBar):
    """Rich bars with the same fields as ``progress.tqdm``: description, bar, count, elapsed and remaining
    time, rate, step and the ``prog_bar`` metrics. Rich's own refresh thread is off: the bar redraws only when
    ember renders it, so metrics are read from the loop's thread at the loop's pace.

    Parameters as :class:`~ember.plugins.progress.tqdm_bar.TQDMProgressBar`.
    """

    identity = "progress.rich"

    def __init__(self, refresh_rate: int = 1, min_interval: float = 0.1, force_terminal: bool | None = None,
                 file: TextIO | None = None) -> None:
        super().__init__(refresh_rate, min_interval, force_terminal, file)
        self._progress: Any = None

    @staticmethod
    def check_available(config: Any = None) -> None:
        packages.require("rich", "progress bar 'rich'", "rich")

    def _open(self, kind: str, total: int | None, description: str, leave: bool) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        if self._progress is None:
            console = Console(file=self.file, force_terminal=True)
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("<"), TimeRemainingColumn(),
                                      TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[metrics]}"),
                                      console=console, auto_refresh=False, transient=False)
            self._progress.start()
        task = self._progress.add_task(description, total=total, rate="", metrics="")
        return (task, leave)

    def _render(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        task_id, _ = bar
        progress = self._progress
        task = progress.tasks[[t.id for t in progress.tasks].index(task_id)]
        elapsed = task.elapsed or 0.0
        rate = f"{n / elapsed:.1f} it/s" if elapsed > 0 and n else ""
        metrics = " ".join(f"{k}={_fmt(v)}" for k, v in postfix.items())
        progress.update(task_id, completed=n, rate=rate, metrics=metrics)
        progress.refresh()

    def _close(self, kind: str, bar: Any) -> None:
        task_id, leave = bar
        progress = self._progress
        if progress is None:
            return
        if not leave:
            progress.remove_task(task_id)
        else:
            progress.stop_task(task_id)
        progress.refresh()
        if not self._drawing():  # the last bar closed: release the terminal
            progress.stop()
            self._progress = None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_progress"] = None
        return state
