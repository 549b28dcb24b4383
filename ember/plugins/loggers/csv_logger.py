"""``logger.csv``: metrics to ``<save_dir>/<name>/version_<n>/metrics.csv``, hyperparameters to
``hparams.yaml`` beside it. The default logger (``Trainer(logger=True)``); needs nothing beyond the standard
library and PyYAML."""

from __future__ import annotations

import csv
import os
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins.loggers import VersionedLogger, save_hparams

_FIRST = ("epoch", "step")


class CSVLogger(VersionedLogger):
    """One row per ``log_metrics`` call: ``epoch``, ``step``, then one column per metric name in the order the
    names first appeared (a cell is empty where a row has no value for that name).

    Rows are buffered and written every ``flush_logs_every_n_steps`` rows and at the end of every run, also
    after an error. When a new name appears, the file is rewritten with the wider header.
    """

    identity = "logger.csv"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.default_of("logger")  # Trainer(logger=True)
    metrics_file = "metrics.csv"

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str = "ember_logs",
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir, name, version, prefix)
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps}): expected >= 1.")
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []  # the header of the file on disk
        self.hparams: dict[str, Any] = {}

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.log_dir, self.metrics_file)

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl
    def setup(self, trainer: Any) -> None:
        self._attach(trainer)

    @hookimpl
    def log_hyperparams(self, params: dict) -> None:
        self.hparams.update(params)
        save_hparams(os.path.join(self.log_dir, "hparams.yaml"), self.hparams)

    @hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        row: dict[str, Any] = {"step": int(step)}
        for name, value in metrics.items():
            if name == "epoch":
                row["epoch"] = int(value) if float(value).is_integer() else value
            else:
                row[self._key(name)] = value
        self._rows.append(row)
        if len(self._rows) >= self.flush_logs_every_n_steps:
            self.save()

    @hookimpl
    def teardown(self) -> None:
        self.save()

    @hookimpl
    def on_exception(self) -> None:
        self.save()

    # -- writing -------------------------------------------------------------------------------------------
    def finalize(self, status: str = "success") -> None:
        """Write the buffered rows (as every run's end does); ``status``, Lightning's argument, is not used."""
        self.save()

    def save(self) -> None:
        """Write the buffered rows."""
        if not self._rows:
            return
        path = self.metrics_path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not self._columns and os.path.exists(path):  # a file from an earlier run of this logger's version
            with open(path, newline="", encoding="utf-8") as f:
                self._columns = next(csv.reader(f), [])
        columns = list(self._columns) or list(_FIRST)
        for row in self._rows:
            columns.extend(k for k in row if k not in columns)
        if columns != self._columns and os.path.exists(path):
            with open(path, newline="", encoding="utf-8") as f:
                old = list(csv.DictReader(f))
            self._write(path, columns, old + self._rows)
        elif columns != self._columns:
            self._write(path, columns, self._rows)
        else:
            with open(path, "a", newline="", encoding="utf-8") as f:
                csv.DictWriter(f, fieldnames=columns).writerows(self._rows)
        self._columns = columns
        self._rows = []

    @staticmethod
    def _write(path: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)
