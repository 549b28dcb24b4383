"""``logger.tensorboard``: scalars and hyperparameters as TensorBoard event files in
``<save_dir>/<name>/version_<n>/`` (with ``hparams.yaml`` beside them). Needs the ``tensorboard`` package:
``pip install 'ember[tensorboard]'``. When it is installed, this is the default logger (``Trainer(logger=True)``),
as in Lightning; ``logger.csv`` otherwise."""

from __future__ import annotations

import os
import warnings
from argparse import Namespace
from typing import Any

import torch

from ember.hookspecs import hookimpl
from ember.plugins._shared import packages
from ember.plugins.loggers import VersionedLogger, plain, save_hparams, tensorboard_available


class TensorBoardLogger(VersionedLogger):
    """Writes through ``torch.utils.tensorboard.SummaryWriter``; ``experiment`` is that writer, for images,
    histograms and the rest of its API. ``hp_metric`` names the metric the HParams tab shows next to the
    hyperparameters (Lightning's ``hp_metric``); None (or Lightning's ``default_hp_metric=False``) writes the
    hyperparameters without one. ``log_graph=True``: :meth:`log_graph` adds the module's graph. ``sub_dir``: a
    folder below the version folder to write into. ``~`` and ``$VARIABLES`` in the folder are expanded."""

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
                 log_graph: bool = False, default_hp_metric: bool = True, sub_dir: str | os.PathLike | None = None,
                 **writer_kwargs: Any) -> None:
        super().__init__(save_dir, name, version, prefix)
        self.hp_metric = hp_metric if default_hp_metric else None
        self._log_graph = log_graph
        self.sub_dir = os.fspath(sub_dir) if sub_dir is not None else None
        self.writer_kwargs = writer_kwargs
        self._experiment: Any = None

    @staticmethod
    def check_available(config: Any = None) -> None:
        packages.require("tensorboard", "logger 'tensorboard'", "tensorboard", alternative="logger='csv'")

    @property
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_<n>[/<sub_dir>]``, with ``~`` and environment variables expanded."""
        path = super().log_dir
        if self.sub_dir:
            path = os.path.join(path, self.sub_dir)
        return os.path.expandvars(os.path.expanduser(path))

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter`` (created on first use)."""
        if self._experiment is None:
            self.check_available()
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(self.log_dir, exist_ok=True)
            self._experiment = SummaryWriter(log_dir=self.log_dir, **self.writer_kwargs)
        return self._experiment

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)  # the version is fixed before any callback asks for the run folder
    def setup(self, trainer: Any) -> None:
        self._attach(trainer)

    @hookimpl(specname="log_hyperparams")
    def _log_hyperparams_hook(self, trainer: Any, params: dict, saved: bool) -> None:
        if saved:
            self.log_hyperparams(params)
        else:  # nothing to show (nor a placeholder metric); the run folder has its hparams.yaml all the same
            path = os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)
            if not os.path.exists(path):
                save_hparams(path, params)
        module = getattr(trainer, "lightning_module", None)
        if self._log_graph and module is not None:  # at each entry point, as Lightning's logger does
            self.log_graph(module)

    def log_hyperparams(self, params: Any, metrics: dict | None = None, step: int | None = None) -> None:
        """Hyperparameters to ``hparams.yaml`` and the HParams tab; ``metrics`` (name: value, or one value for
        ``hp_metric``), when given, are logged at ``step`` and shown next to them (else ``hp_metric``, as a
        placeholder of -1, when the logger was made with it)."""
        from torch.utils.tensorboard.summary import hparams

        params = vars(params) if isinstance(params, Namespace) else dict(params)
        save_hparams(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), params)
        if metrics is None:
            metrics = {self.hp_metric: -1} if self.hp_metric else {}
        elif not isinstance(metrics, dict):
            metrics = {"hp_metric": metrics}
        if metrics:
            self.log_metrics({name: _scalar(value) for name, value in metrics.items()}, step)
        flat = _flatten(plain(params))
        if not flat:
            return
        for summary in hparams(flat, {name: _scalar(value) for name, value in metrics.items()}):
            self.experiment.file_writer.add_summary(summary)

    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """Add ``model``'s graph, traced with ``input_array`` (default ``model.example_input_array``), when the
        logger was made with ``log_graph=True``; an input that cannot be traced is a warning, not an error."""
        if not self._log_graph:
            return
        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None:
            warnings.warn("Could not log computational graph to TensorBoard: The `model.example_input_array` "
                          "attribute is None and an `input_array` was not given.", UserWarning, stacklevel=2)
            return
        if not isinstance(input_array, (torch.Tensor, tuple)):
            warnings.warn(f"Could not log computational graph to TensorBoard: an input of type "
                          f"{type(input_array).__name__} can't be traced by TensorBoard; pass a tensor, or a tuple "
                          "of the positional arguments of `forward()`.", UserWarning, stacklevel=2)
            return
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        moved = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in input_array) \
            if isinstance(input_array, tuple) else input_array.to(device)
        modules = list(model.modules())
        for m in modules:  # tracing reads every attribute; ember.Module.trainer answers None meanwhile
            m.__dict__["_jit_is_scripting"] = True
        try:
            self.experiment.add_graph(model, moved)
        finally:
            for m in modules:
                m.__dict__.pop("_jit_is_scripting", None)

    @hookimpl(specname="log_metrics")
    def _log_metrics_hook(self, metrics: dict, step: int) -> None:
        self.log_metrics(metrics=metrics, step=step)  # by name, as Lightning's Trainer calls it

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        """Each value as a scalar at ``step`` (what the Trainer calls with each logged row)."""
        writer = self.experiment
        for name, value in metrics.items():
            writer.add_scalar(self._key(name), value, global_step=step)

    @hookimpl
    def teardown(self, trainer: Any) -> None:
        if trainer.state.status not in ("failed", "interrupted"):  # on_exception finalized it already
            self.finalize("success")

    @hookimpl
    def on_exception(self) -> None:
        self.finalize("failed")

    def save(self) -> None:
        """Write what the writer buffers to the event file."""
        if self._experiment is not None:
            self._experiment.flush()

    def finalize(self, status: str = "success") -> None:
        """Flush and close the writer (Lightning's ``finalize``); the next write opens a new event file in the
        same folder."""
        if self._experiment is not None:
            self._experiment.flush()
            self._experiment.close()
            self._experiment = None


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value


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
