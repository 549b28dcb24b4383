"""``logger.tensorboard``: scalars and hyperparameters as TensorBoard event files in
``<save_dir>/<name>/version_<n>/`` (with ``hparams.yaml`` beside them). Needs the ``tensorboard`` package:
``pip install 'ember[tensorboard]'``. When it is installed, this is the default logger (``Trainer(logger=True)``),
as in Lightning; ``logger.csv`` otherwise."""

from __future__ import annotations

import os
from typing import Any

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.loggers import VersionedLogger, plain, save_hparams, tensorboard_available


class TensorBoardLogger(VersionedLogger):
    """Writes through ``torch.utils.tensorboard.SummaryWriter``; ``experiment`` is that writer, for images,
    histograms and the rest of its API. ``hp_metric`` names the metric the HParams tab shows next to the
    hyperparameters (Lightning's ``hp_metric``); None writes the hyperparameters without one."""

    identity = "logger.tensorboard"
    #: The hyperparameter file beside the event files.
    NAME_HPARAMS_FILE = "hparams.yaml"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        if tensorboard_available():  # Trainer(logger=True), as Lightning's default logger
            options.default_of("logger")

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str = "ember_logs",
                 version: int | str | None = None, prefix: str = "", hp_metric: str | None = "hp_metric",
                 **writer_kwargs: Any) -> None:
        super().__init__(save_dir, name, version, prefix)
        self.hp_metric = hp_metric
        self.writer_kwargs = writer_kwargs
        self._writer: Any = None

    @staticmethod
    def check_available(config: Any = None) -> None:
        try:
            import tensorboard  # noqa: F401
        except ImportError as exc:
            raise ConfigurationError("logger 'tensorboard' needs the tensorboard package: "
                                     "pip install 'ember[tensorboard]' (or choose logger='csv').") from exc

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` (created on first use)."""
        if self._writer is None:
            self.check_available()
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(self.log_dir, exist_ok=True)
            self._writer = SummaryWriter(log_dir=self.log_dir, **self.writer_kwargs)
        return self._writer

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)  # the version is fixed before any callback asks for the run folder
    def setup(self, trainer: Any) -> None:
        self._attach(trainer)

    @hookimpl
    def log_hyperparams(self, params: dict) -> None:
        from torch.utils.tensorboard.summary import hparams

        save_hparams(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), params)
        flat = _flatten(plain(dict(params)))
        if not flat:
            return
        metrics = {self.hp_metric: -1.0} if self.hp_metric else {}
        for summary in hparams(flat, metrics):
            self.experiment.file_writer.add_summary(summary)

    @hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        writer = self.experiment
        for name, value in metrics.items():
            writer.add_scalar(self._key(name), value, global_step=step)

    @hookimpl
    def teardown(self) -> None:
        self.finalize()

    @hookimpl
    def on_exception(self) -> None:
        self.finalize()

    def save(self) -> None:
        """Write what the writer buffers to the event file."""
        if self._writer is not None:
            self._writer.flush()

    def finalize(self, status: str = "success") -> None:
        """Flush and close the writer (Lightning's ``finalize``); the next write opens a new event file in the
        same folder."""
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


def _flatten(params: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a/b`` keys; lists as text (the HParams plugin takes scalars and strings only)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out
