"""``progress.tqdm``: the default progress bar, drawn with tqdm."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ember.core.hooks.options import boolean
from ember.hookspecs import hookimpl
from ember.plugins.progress import ProgressBar, _fmt


class TQDMProgressBar(ProgressBar):
    """Bars for training epochs, validation, testing and prediction: the description (``Epoch 3/10``),
    the count, elapsed and remaining time, the rate (it/s), the step and the ``prog_bar`` metrics.

    :param refresh_rate: render at most every this many batches (0: draw nothing); 20 for the default on Google
        Colab, and at least ``TQDM_MINITERS`` where that variable is set.
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
        super().__init__(_refresh_rate(refresh_rate), min_interval, force_terminal, file)
        #: The last epoch's training bar, closed (its line stays), and the file it drew on: reopened for the next
        #: epoch, since making a tqdm bar costs more than a hundred calls. Terminal bars only (see _bar_class).
        self._closed_train: tuple[Any, TextIO] | None = None

    def _open(self, kind: str, total: int | None, description: str, leave: bool) -> Any:
        if not leave and self.min_interval > 0:
            # A bar that is erased when it ends (validation within a fit, the sanity check) is first drawn after
            # min_interval: one that ends sooner would only flash. It is made then, not before: making and
            # closing a tqdm bar that never draws costs a hundred calls every epoch.
            return _Deferred(total, description)
        closed, self._closed_train = self._closed_train, None
        if kind == "train" and closed is not None and closed[1] is self.file:
            closed[0].reopen(total, description)
            return closed[0]
        return self._tqdm(total, description, leave)

    def _tqdm(self, total: int | None, description: str, leave: bool) -> Any:
        return _bar_class()(total=total, desc=description, leave=leave, file=self.file, dynamic_ncols=True,
                            mininterval=0.0, miniters=1, smoothing=0.0, unit="it", disable=False)

    def _render(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        if isinstance(bar, _Deferred):  # due to render: min_interval has passed since it started
            bar = bar.open(self._tqdm)
        bar.set_postfix_str(_postfix(postfix), refresh=False)
        if n > bar.n:
            bar.update(n - bar.n)
        else:
            bar.refresh()

    def _close(self, kind: str, bar: Any) -> None:
        if isinstance(bar, _Deferred):
            bar = bar.bar
        if bar is not None:
            bar.close()

    def _render_and_close(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        # tqdm draws a bar that stays (leave=True) once more when it closes: set the count and the postfix
        # without drawing, and let close() draw them (a bar that goes is erased, drawn or not)
        if isinstance(bar, _Deferred):  # a bar that goes is erased: one never drawn stays undrawn
            if bar.bar is None:
                return
            bar = bar.bar
        bar.set_postfix_str(_postfix(postfix), refresh=False)
        bar.n = n
        bar.close()
        if kind == "train" and callable(getattr(bar, "reopen", None)):
            self._closed_train = (bar, self.file)

    def _release(self) -> None:
        self._closed_train = None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_closed_train"] = None  # a terminal bar: made again after unpickling
        return state


def _refresh_rate(asked: int) -> int:
    """The refresh rate in effect, as Lightning's bar resolves it: the default of 1 becomes 20 on Google Colab
    (``COLAB_GPU`` set), where frequent renders crash the notebook; ``TQDM_MINITERS`` raises it (and turns on a bar
    asked for 0)."""
    if os.environ.get("COLAB_GPU") and asked == 1:
        return 20
    if "TQDM_MINITERS" in os.environ:
        return max(int(os.environ["TQDM_MINITERS"]), asked)
    return asked


class _Deferred:
    """A bar that is erased when it ends, not made until its first render is due (``min_interval`` after it
    started); it then shows the time since it started, as a bar made at the start would."""

    __slots__ = ("total", "description", "started", "bar")

    def __init__(self, total: int | None, description: str) -> None:
        self.total, self.description = total, description
        self.started = time.time()  # tqdm's clock
        self.bar: Any = None

    def open(self, make: Callable[..., Any]) -> Any:
        if self.bar is None:
            self.bar = make(self.total, self.description, leave=False)
            self.bar.start_t = self.started
        return self.bar


def _postfix(values: dict[str, Any]) -> str:
    """The text ``tqdm.set_postfix(values)`` would set (``key=value``, comma-separated, in the order given, the
    values formatted by ``_fmt``), built in one expression: tqdm's own copies the values into an ordered dict
    and walks it twice, on every render."""
    return ", ".join(f"{k}={_fmt(v).strip()}" for k, v in values.items())


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

        def reopen(self, total: int | None, description: str) -> None:
            """Undo ``close()`` (the bar left the screen's bars, its line stays) and start again as a new bar
            would: at 0 of ``total``, with ``description``, no postfix, its clock restarted, drawn once."""
            with self._lock:
                self._instances.add(self)
                self.pos = self._get_free_pos(self)
            self.disable = False
            self.sp = self.status_printer(self.fp)
            self.set_description_str(description, refresh=False)
            self.postfix = None
            self.reset(total)

    _BAR_CLASS = Bar
    return Bar
