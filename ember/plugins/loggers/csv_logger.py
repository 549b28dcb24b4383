"""``logger.csv``: metrics to ``<save_dir>/<name>/version_<n>/metrics.csv``, hyperparameters to
``hparams.yaml`` beside it. The default logger (``Trainer(logger=True)``) when the ``tensorboard`` package is not
installed; needs nothing beyond the standard library and PyYAML."""

from __future__ import annotations

import csv
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins.loggers import VersionedLogger, save_hparams, tensorboard_available

_FIRST = ("epoch", "step")


class CSVLogger(VersionedLogger):
    """One row per ``log_metrics`` call: ``epoch`` (when logged), ``step``, then one column per metric name in the
    order the names first appeared (a cell is empty where a row has no value for that name).

    Rows are buffered and written every ``flush_logs_every_n_steps`` rows and at the end of every run, also
    after an error. When a new name appears, the file is rewritten with the wider header.
    """

    identity = "logger.csv"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        if not tensorboard_available():  # else logger.tensorboard is Trainer(logger=True)'s logger, as in Lightning
            options.default_of("logger")
    metrics_file = "metrics.csv"

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str = "ember_logs",
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir, name, version, prefix)
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps}): expected >= 1.")
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []
        self._count = 0  # rows logged, for log_metrics without a step
        self._columns: list[str] = []  # the header of the file on disk
        self.hparams: dict[str, Any] = {}

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.log_dir, self.metrics_file)

    @property
    def experiment(self) -> ExperimentWriter:
        """The experiment writer (Lightning's ``CSVLogger.experiment``): ``log_metrics``, ``log_hparams``,
        ``save`` and ``metrics_file_path``, writing through this logger."""
        return ExperimentWriter(self)

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)  # the version is fixed before any callback asks for the run folder
    def setup(self, trainer: Any) -> None:
        self._attach(trainer)

    @hookimpl(specname="log_hyperparams")
    def _log_hyperparams_hook(self, params: dict) -> None:
        self.log_hyperparams(params)

    @hookimpl(specname="log_metrics")
    def _log_metrics_hook(self, metrics: dict, step: int) -> None:
        self.log_metrics(metrics=metrics, step=step)  # by name, as Lightning's Trainer calls it

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Add ``params`` to the run's ``hparams.yaml`` (written even when there are none, so that the run folder
        exists)."""
        self.hparams.update(vars(params) if isinstance(params, Namespace) else (params or {}))
        save_hparams(os.path.join(self.log_dir, ExperimentWriter.NAME_HPARAMS_FILE), self.hparams)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Buffer one row; without ``step``, the row's index among those this logger has written."""
        if step is None:
            step = self._count
        self._count += 1
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
    def teardown(self, trainer: Any) -> None:
        if trainer.state.status not in ("failed", "interrupted"):  # on_exception finalized it already
            self.finalize("success")

    @hookimpl
    def on_exception(self) -> None:
        self.finalize("failed")

    def finalize(self, status: str = "success") -> None:
        """Write what is buffered (Lightning's ``finalize``; the file is complete whatever ``status``)."""
        self.save()

    # -- writing -------------------------------------------------------------------------------------------
    @property
    def pending_rows(self) -> list[dict[str, Any]]:
        """The rows logged and not yet written to the file (emptied by :meth:`save`)."""
        return self._rows

    def save(self) -> None:
        """Write the buffered rows."""
        if not self._rows:
            return
        path = self.metrics_path
        if "://" in path:  # a URL (memory://, s3://, ...): through fsspec, which torch installs
            self._save_remote(path)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not self._columns and os.path.exists(path):  # a file from an earlier run of this logger's version
            with open(path, newline="", encoding="utf-8") as f:
                self._columns = next(csv.reader(f), [])
        # ``epoch`` (when a row has it) and ``step`` lead a new file's header
        columns = list(self._columns) or [c for c in _FIRST if any(c in row for row in self._rows)]
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

    def _save_remote(self, url: str) -> None:
        """Rewrite the whole file with the buffered rows added (remote stores may not append)."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
        old: list[dict[str, Any]] = []
        columns: list[str] = []
        if fs.isfile(path):
            with fs.open(path, "r", newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                old, columns = list(reader), list(reader.fieldnames or [])
        else:
            fs.makedirs(os.path.dirname(path), exist_ok=True)
        columns = columns or [c for c in _FIRST if any(c in row for row in self._rows)]
        for row in self._rows:
            columns.extend(k for k in row if k not in columns)
        with fs.open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(old + self._rows)
        self._columns, self._rows = columns, []

    @staticmethod
    def _write(path: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)


class ExperimentWriter:
    """``CSVLogger.experiment``: the writer of one run folder, as Lightning's experiment writer."""

    NAME_HPARAMS_FILE = "hparams.yaml"
    NAME_METRICS_FILE = "metrics.csv"

    def __init__(self, logger: CSVLogger) -> None:
        self._logger = logger

    @property
    def log_dir(self) -> str:
        return self._logger.log_dir

    @property
    def metrics_file_path(self) -> str:
        return self._logger.metrics_path

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows logged and not yet written to the file (emptied by :meth:`save`)."""
        return self._logger.pending_rows

    def log_metrics(self, metrics_dict: dict[str, Any], step: int | None = None) -> None:
        self._logger.log_metrics(metrics_dict, step)

    def log_hparams(self, params: dict[str, Any]) -> None:
        self._logger.log_hyperparams(params)

    def save(self) -> None:
        self._logger.save()
