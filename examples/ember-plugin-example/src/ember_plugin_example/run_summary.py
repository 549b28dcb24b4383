"""``callback.run-summary``: writes what a fit did to ``run_summary.json``, when asked for.

Installing the package changes no run: like a pytest plugin that adds a command-line option, it adds the Trainer
argument ``run_summary`` (``Trainer(run_summary=True)``, or the same argument on the command line or in a config file),
which switches the plugin on. Selecting it by name works too: ``Trainer(callbacks=["run-summary"])``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ember


def _optional_bool(value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise ember.ConfigurationError(f"Trainer(run_summary={value!r}) is invalid: expected True, False or None.")


class RunSummary:
    """Writes ``<default_root_dir>/run_summary.json`` when a fit ends or fails (global rank 0 only).

    The file holds the outcome, epochs, optimizer steps, the precision, the final ``callback_metrics`` and the
    training time of this fit and of all fits resumed from its checkpoints: the running totals are plugin
    state, saved under ``checkpoint["plugins"]["callback.run-summary"]``.

    It implements no per-batch hook, so it adds nothing to the cost of a training step.
    """

    identity = "callback.run-summary"
    filename = "run_summary.json"

    @staticmethod
    @ember.hookimpl
    def add_options(options: Any) -> None:
        # A value other than None/False registers this plugin for the run; the default leaves runs as they are.
        options.add("run_summary", type="bool | None", default=None, validate=_optional_bool,
                    switches="callback.run-summary",
                    help="write run_summary.json (outcome, steps, metrics, time) into default_root_dir after fit")

    def __init__(self) -> None:
        self.total_seconds = 0.0  # over every fit this state has been carried through
        self.fits = 0
        self._started: float | None = None

    @ember.hookimpl
    def on_fit_start(self) -> None:
        self._started = time.perf_counter()

    @ember.hookimpl
    def on_fit_end(self, trainer: Any) -> None:
        self._write(trainer, "finished")

    @ember.hookimpl
    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        if trainer.state.get("fn") == "fit":
            self._write(trainer, f"failed: {type(exception).__name__}: {exception}")

    @ember.hookimpl
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.setdefault("plugins", {})[self.identity] = {
            "total_seconds": self.total_seconds + self._elapsed(), "fits": self.fits}

    @ember.hookimpl
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("plugins", {}).get(self.identity)
        if state:
            self.total_seconds = float(state["total_seconds"])
            self.fits = int(state["fits"])

    def _elapsed(self) -> float:
        return 0.0 if self._started is None else time.perf_counter() - self._started

    def _write(self, trainer: Any, outcome: str) -> None:
        seconds = self._elapsed()
        self._started = None
        self.total_seconds += seconds
        self.fits += 1
        if trainer.global_rank != 0:
            return
        summary = {
            "outcome": outcome,
            "epochs": trainer.current_epoch,
            "global_step": trainer.global_step,
            "precision": trainer.precision,
            "metrics": {k: float(v) for k, v in sorted(trainer.callback_metrics.items())},
            "seconds": round(seconds, 3),
            "total_seconds": round(self.total_seconds, 3),
            "fits": self.fits,
        }
        os.makedirs(trainer.default_root_dir, exist_ok=True)
        path = os.path.join(trainer.default_root_dir, self.filename)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
