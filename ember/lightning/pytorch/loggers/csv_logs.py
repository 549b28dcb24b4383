"""``lightning.pytorch.loggers.csv_logs``: ``CSVLogger`` with Lightning's default folder name, and the
``ExperimentWriter`` behind it.

It is ember's logger (:mod:`ember.plugins.loggers.csv_logger`) whose runs go to ``<save_dir>/lightning_logs/
version_<n>`` unless ``name`` says otherwise, as Lightning's do (ember's own class uses ``ember_logs``).
"""

# No ``from __future__ import annotations``: the signature's annotations are real types, which argument parsers
# (jsonargparse, LightningCLI) read.
import os

from ember.lightning._names import LIGHTNING_LOGS, CoversEmber
from ember.plugins.loggers import csv_logger as _ember
from ember.plugins.loggers.csv_logger import ExperimentWriter


class CSVLogger(_ember.CSVLogger, metaclass=CoversEmber):
    """ember's ``CSVLogger`` with Lightning's default ``name="lightning_logs"`` (every ember ``CSVLogger`` counts as
    an instance of it)."""

    _covers_ember = True

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str | None = LIGHTNING_LOGS,
                 version: int | str | None = None, prefix: str = "",
                 flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir=save_dir, name=name or "", version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)


__all__ = ["CSVLogger", "ExperimentWriter"]
