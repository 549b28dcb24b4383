"""``lightning.pytorch.loggers.csv_logs``: ember's ``CSVLogger`` and the ``ExperimentWriter`` behind it."""

from __future__ import annotations

from ember.plugins.loggers.csv_logger import CSVLogger, ExperimentWriter

__all__ = ["CSVLogger", "ExperimentWriter"]
