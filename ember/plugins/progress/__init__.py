"""Progress bars: plugins of the ``progress`` role (one active per run). ``progress.tqdm`` is on by default
(``Trainer(enable_progress_bar=False)`` turns it off); passing another progress plugin replaces it.

:class:`ProgressBar` holds what every bar shares: which events open, advance and close a bar, and when a bar
renders. Rendering reads the ``prog_bar`` metrics, which synchronises with the device, so a bar renders at
most every ``refresh_rate`` batches and ``min_interval`` seconds, and on the last batch of each epoch; between
renders a batch costs a counter increment (and, in a terminal, a clock read once ``refresh_rate`` batches
have passed).

When the output is not a terminal (a log file, CI, a pipe), no bar is drawn: one line per training epoch is
printed instead, with the epoch, the batch count, the step, the rate and the ``prog_bar`` metrics.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from ember.hookspecs import hookimpl

_STAGE_TITLE = {"validate": "Validation", "test": "Testing", "predict": "Predicting", "sanity": "Sanity check"}


class _Count:
    """The batches of one bar (training, validation, ...): counted every batch; ``bar`` (None when nothing is
    drawn) is rendered when ``shown`` and ``when`` (the count and the time of the last render) say it is due."""

    __slots__ = ("n", "total", "bar", "shown", "when")

    def __init__(self, total: int | None, bar: Any) -> None:
        self.n = 0
        self.total = total
        self.bar = bar
        self.shown = 0
        self.when = time.monotonic()

    def undrawn(self) -> _Count:
        """A copy that counts on without a bar."""
        copy = _Count(self.total, None)
        copy.n, copy.shown, copy.when = self.n, self.shown, self.when
        return copy


class ProgressBar:
    """The shared event logic; subclasses draw with a library (``_open``, ``_render``, ``_close``)."""

    role = "progress"

    def __init__(self, refresh_rate: int = 1, min_interval: float = 0.1, force_terminal: bool | None = None,
                 file: TextIO | None = None) -> None:
        if refresh_rate < 0:
            raise ValueError(f"refresh_rate={refresh_rate}: expected >= 1, or 0 to draw nothing (as "
                             "enable_progress_bar=False).")
        self.refresh_rate = refresh_rate
        self.min_interval = min_interval
        self.force_terminal = force_terminal
        self._file = file
        self._live: dict[str, _Count] = {}  # the bars open now, by kind ("train", "validate", ...)
        self._epoch_start = 0.0
        self._tty = False
        self._active = False
        self._enabled = True  # enable() / disable(); a rank other than 0 is disabled at setup

    # -- what subclasses implement ---------------------------------------------------------------------
    def _open(self, kind: str, total: int | None, description: str, leave: bool) -> Any:
        raise NotImplementedError

    def _render(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        raise NotImplementedError

    def _close(self, kind: str, bar: Any) -> None:
        raise NotImplementedError

    def _render_and_close(self, kind: str, bar: Any, n: int, postfix: dict[str, Any]) -> None:
        """The final render of a bar, then closing it; a library that draws the bar once more when closing
        overrides this to draw it once."""
        self._render(kind, bar, n, postfix)
        self._close(kind, bar)

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def file(self) -> TextIO:
        return self._file if self._file is not None else sys.stdout

    def is_terminal(self) -> bool:
        if self.force_terminal is not None:
            return self.force_terminal
        isatty = getattr(self.file, "isatty", None)
        return bool(isatty and isatty())

    @staticmethod
    def train_total(trainer: Any) -> int | float:
        """The training bar's length for the epoch that starts: the loader's batches, and, in a fit that only
        ``max_steps`` bounds (``max_epochs=-1``), at most the steps left, so that a loader without a length (an
        iterable dataset, a generator) still shows how far the fit has come."""
        batches, steps = trainer.num_training_batches, trainer.max_steps
        if trainer.max_epochs == -1 and steps is not None and steps > 0:
            return min(batches, steps - trainer.global_step)
        return batches

    @staticmethod
    def _total(counts: Any) -> int | None:
        total = sum(counts) if isinstance(counts, (list, tuple)) else counts
        return None if total is None or total == math.inf else int(total)

    # -- Lightning's public surface of a bar ------------------------------------------------------------------
    def enable(self) -> None:
        """Let the bar draw (the default)."""
        self._enabled = True

    def disable(self) -> None:
        """Draw nothing (as on ranks other than 0); a disabled bar stays so until :meth:`enable`."""
        self._enabled = False
        self._active = self._tty = False

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self.refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        """The values a render shows after the counts (and the step, in training): the loggers' version as
        ``v_num`` (see :func:`standard_metrics`) and the ``prog_bar`` metrics. Override to change them."""
        return {**standard_metrics(trainer), **trainer.progress_bar_metrics}

    def metrics(self, trainer: Any) -> dict[str, Any]:
        """What a render shows after the counts: the step (in training), then :meth:`get_metrics`."""
        out: dict[str, Any] = {}
        if trainer.state.get("fn") == "fit":
            out["step"] = trainer.global_step
        out.update(self.get_metrics(trainer, getattr(trainer, "lightning_module", None)))
        return out

    def _start(self, kind: str, total: int | None, description: str, leave: bool) -> None:
        self._finish(kind)
        self._live[kind] = _Count(total, self._open(kind, total, description, leave) if self._tty else None)

    def _advance(self, trainer: Any, kind: str, last: bool = False) -> None:
        count = self._live.get(kind)
        if count is not None:
            count.n += 1
            if count.bar is not None:
                self._render_if_due(trainer, kind, count, last)

    def _render_if_due(self, trainer: Any, kind: str, count: _Count, last: bool) -> None:
        n = count.n
        if last or n - count.shown >= self.refresh_rate:
            now = time.monotonic()
            if last or now - count.when >= self.min_interval:
                count.shown, count.when = n, now
                self._render(kind, count.bar, n, self.metrics(trainer))

    def _finish(self, kind: str, trainer: Any = None) -> None:
        count = self._live.pop(kind, None)
        if count is not None and count.bar is not None:
            if trainer is not None:
                self._render_and_close(kind, count.bar, count.n, self.metrics(trainer))
            else:
                self._close(kind, count.bar)

    def _drawing(self) -> bool:
        """Some bar is drawn now."""
        return any(count.bar is not None for count in self._live.values())

    # -- hooks ---------------------------------------------------------------------------------------------
    # The loop passes the arguments named before ``*_``; the rest takes Lightning's positional arguments, so that a
    # Lightning-style subclass may call ``super().on_validation_batch_end(trainer, pl_module, outputs, batch, ...)``.
    @hookimpl
    def setup(self, trainer: Any, *_: Any) -> None:
        if not trainer.is_global_zero:
            self.disable()
        self._active = self.is_enabled
        self._tty = self._active and self.is_terminal()

    @hookimpl
    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        if not self._active:
            return
        self._epoch_start = time.monotonic()
        epochs = trainer.max_epochs
        title = f"Epoch {trainer.current_epoch + 1}" + (f"/{epochs}" if epochs and epochs > 0 else "")
        self._start("train", self._total(self.train_total(trainer)), title, leave=True)

    @hookimpl
    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        count = self._live.get("train")  # every step: counting is all, unless a render is due
        if count is not None:
            count.n += 1
            if count.bar is not None:
                self._render_if_due(trainer, "train", count, batch_idx + 1 >= trainer.num_training_batches)

    @hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: Any, *_: Any) -> None:
        if not self._active:
            return
        if self._tty:
            self._finish("train", trainer)
            return
        count = self._live.pop("train", None)
        n = count.n if count is not None else 0
        elapsed = max(time.monotonic() - self._epoch_start, 1e-9)
        epochs = trainer.max_epochs
        parts = [f"Epoch {trainer.current_epoch + 1}" + (f"/{epochs}" if epochs and epochs > 0 else "") +
                 f": {n} batches in {elapsed:.2f}s ({n / elapsed:.1f} it/s)"]
        parts += [f"{k}={_fmt(v)}" for k, v in self.metrics(trainer).items()]
        print(", ".join(parts), file=self.file, flush=True)

    @hookimpl
    def on_validation_start(self, trainer: Any, *_: Any) -> None:
        if not self._tty:
            return
        kind = "sanity" if trainer.sanity_checking else "validate"
        counts = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        self._start(kind, self._total(counts), _STAGE_TITLE[kind], leave=trainer.state.get("fn") != "fit")

    @hookimpl
    def on_validation_batch_end(self, trainer: Any, *_: Any) -> None:
        if self._tty:  # outside a terminal, validation, test and predict bars are not even counted
            self._advance(trainer, "sanity" if trainer.sanity_checking else "validate")

    @hookimpl
    def on_validation_end(self, trainer: Any, *_: Any) -> None:
        kind = "sanity" if trainer.sanity_checking else "validate"
        self._finish(kind, trainer if trainer.state.get("fn") != "fit" else None)
        train = self._live.get("train")
        # show the new validation metrics on the training bar; after the epoch's last batch the bar's final
        # render at the epoch's end (right after this) shows them
        if train is not None and train.bar is not None and train.n != train.total:
            self._render("train", train.bar, train.n, self.metrics(trainer))

    @hookimpl
    def on_test_start(self, trainer: Any, *_: Any) -> None:
        if self._tty:
            self._start("test", self._total(trainer.num_test_batches), _STAGE_TITLE["test"], leave=True)

    @hookimpl
    def on_test_batch_end(self, trainer: Any, *_: Any) -> None:
        if self._tty:
            self._advance(trainer, "test")

    @hookimpl
    def on_test_end(self, trainer: Any, *_: Any) -> None:
        self._finish("test", trainer)

    @hookimpl
    def on_predict_start(self, trainer: Any, *_: Any) -> None:
        if self._tty:
            self._start("predict", self._total(trainer.num_predict_batches), _STAGE_TITLE["predict"], leave=True)

    @hookimpl
    def on_predict_batch_end(self, trainer: Any, *_: Any) -> None:
        if self._tty:
            self._advance(trainer, "predict")

    @hookimpl
    def on_predict_end(self, *_: Any) -> None:
        self._finish("predict")

    @hookimpl
    def on_exception(self, *_: Any) -> None:
        self._close_all()

    @hookimpl
    def teardown(self, *_: Any) -> None:
        self._close_all()

    def _close_all(self) -> None:
        for kind in list(self._live):
            self._finish(kind)
        self._release()

    def _release(self) -> None:
        """Let go of what a subclass keeps between bars (a closed bar it reuses); at the end of a run."""

    def __getstate__(self) -> dict:  # the bars hold terminals and threads
        state = dict(self.__dict__)
        state["_live"] = {kind: count.undrawn() for kind, count in self._live.items()}
        state["_file"] = None
        return state


def standard_metrics(trainer: Any) -> dict[str, int | str]:
    """``{"v_num": version}`` of the trainer's loggers (the last 4 characters of a string version; several loggers'
    distinct versions joined by ``_``), or ``{}`` without a logger or a version."""
    versions: list[Any] = []
    for logger in getattr(trainer, "loggers", None) or []:
        version = getattr(logger, "version", None)
        if version not in versions:
            versions.append(version)
    if not versions:
        return {}
    version = versions[0] if len(versions) == 1 else "_".join(str(v) for v in versions)
    if version in ("", None):
        return {}
    return {"v_num": version[-4:] if isinstance(version, str) else version}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
