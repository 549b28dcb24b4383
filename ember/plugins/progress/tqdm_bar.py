"""``progress.tqdm``: the default progress bar, drawn with tqdm."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ember.core.hooks.options import boolean
from ember.hookspecs import hookimpl
from ember.plugins.progress import ProgressBar, _fmt


class TQDMProgressBar(ProgressBar):
    """Bars for training epochs, validation, testing and prediction: the description (``Epoch 3/10``),
    the count, elapsed and remaining time, the rate (it/s), the step and the ``prog_bar`` metrics.

    :param refresh_rate: render at most every this many batches.
    :param min_interval: and at most every this many seconds.
    :param force_terminal: draw bars even when the output is not a terminal (True), or never (False).
    :param file: where to write (``sys.stdout`` at the time of the run by default).
    """

    identity = "progress.tqdm"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("enable_progress_bar", type="bool", default=True, validate=boolean("enable_progress_bar"),
                    switches="progress.",
                    help="show the default progress bar (progress.tqdm); a progress plugin passed in callbacks "
                         "replaces it")

    def __init__(self, refresh_rate: int = 1, min_interval: float = 0.1, force_terminal: bool | None = None,
                 file: TextIO | None = None) -> None:
        super().__init__(refresh_rate, min_interval, force_terminal, file)

    def _open(self, kind: str, total: int | None, description: str, leave: bool) -> Any:
        tqdm = _bar_class()
        # A bar that is erased when it ends (validation within a fit, the sanity check) is first drawn after
        # min_interval: one that ends sooner would only flash, and drawing and erasing it costs every epoch.
        return tqdm(total=total, desc=description, leave=leave, file=self.file, dynamic_ncols=True,
                    mininterval=0.0, miniters=1, smoothing=0.0, delay=0.0 if leave else self.min_interval,
                    unit="it", disable=False)

    def _render(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)
        if n > bar.n:
            bar.update(n - bar.n)
        else:
            bar.refresh()

    def _close(self, kind: str, bar: Any) -> None:
        bar.close()

    def _render_and_close(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        # tqdm draws a bar that stays (leave=True) once more when it closes: set the count and the postfix
        # without drawing, and let close() draw them (a bar that goes is erased, drawn or not)
        bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)
        bar.n = n
        bar.close()


_BAR_CLASS: Any = None


def _bar_class() -> Any:
    """``tqdm.auto.tqdm``; in a terminal, with a line printer that measures a plain ASCII line with ``len``.
    tqdm measures every line it draws character by character (for wide East Asian characters), which is most
    of the cost of drawing a bar; a line of ASCII without escape codes is as wide as it is long."""
    global _BAR_CLASS
    if _BAR_CLASS is not None:
        return _BAR_CLASS
    from tqdm import std
    from tqdm.auto import tqdm
    from tqdm.utils import disp_len

    if tqdm.status_printer is not std.tqdm.status_printer:  # a notebook's widget, or another front end: as is
        _BAR_CLASS = tqdm
        return tqdm

    class Bar(tqdm):  # type: ignore[misc,valid-type]
        @staticmethod
        def status_printer(file: Any) -> Any:
            flush = getattr(file, "flush", None)
            if file in (sys.stderr, sys.stdout):  # what was printed before the bar comes first
                sys.stderr.flush()
                sys.stdout.flush()
            shown = 0

            def show(line: str) -> None:
                nonlocal shown
                width = len(line) if line.isascii() and "\x1b" not in line else disp_len(line)
                file.write("\r" + line + " " * max(shown - width, 0))
                if flush is not None:
                    flush()
                shown = width

            return show

    _BAR_CLASS = Bar
    return Bar
