"""``logger.mlflow``: metrics, hyperparameters and the run's status in an MLflow tracking store.

Needs MLflow: ``pip install 'ember[mlflow]'`` (``mlflow-skinny`` with SQLAlchemy for a local database; the full
``mlflow`` package works the same). With no ``tracking_uri`` (argument or ``MLFLOW_TRACKING_URI``), runs go to a
SQLite database ``<save_dir>/mlflow.db`` (MLflow's own default backend); ``mlflow ui --backend-store-uri
sqlite:///<save_dir>/mlflow.db`` shows them. A server (``http://...``) or any other store MLflow knows is given as
``tracking_uri``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins._shared import packages
from ember.plugins.loggers import plain

#: The trainer's run status -> MLflow's run status.
_STATUS = {"failed": "FAILED", "interrupted": "KILLED"}
#: Lightning's ``finalize(status)`` values -> MLflow's.
_LIGHTNING_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}
#: MLflow refuses longer parameter values.
_PARAM_LIMIT = 6000


class MLFlowLogger:
    """Log to MLflow through ``mlflow.tracking.MlflowClient``; ``experiment`` is that client and ``run_id`` the
    run (created on first use, or ``run_id=`` to continue one). Lightning's arguments.

    :param experiment_name: created if it does not exist.
    :param run_name: the run's display name.
    :param tracking_uri: where runs are stored; default ``MLFLOW_TRACKING_URI`` or ``sqlite:///<save_dir>/mlflow.db``.
    :param tags: tags set on the run.
    :param save_dir: the folder of the default database; default the Trainer's ``default_root_dir``.
    :param prefix: put before every metric name (``prefix-name``).
    :param artifact_location: where a new experiment keeps its artifacts.
    :param run_id: log into this existing run instead of creating one.
    """

    identity = "logger.mlflow"
    role = "logger"

    def __init__(self, experiment_name: str = "ember_logs", run_name: str | None = None,
                 tracking_uri: str | None = None, tags: Mapping[str, Any] | None = None,
                 save_dir: str | os.PathLike | None = None, prefix: str = "", artifact_location: str | None = None,
                 run_id: str | None = None) -> None:
        self.check_available()
        self.experiment_name = experiment_name
        self.run_name = run_name
        self._tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self.tags = dict(tags or {})
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self.prefix = prefix
        self.artifact_location = artifact_location
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._client: Any = None

    @staticmethod
    def check_available(config: Any = None) -> None:
        packages.require("mlflow", "logger 'mlflow'", "mlflow", alternative="logger='csv'")

    # -- where -----------------------------------------------------------------------------------------------
    @property
    def save_dir(self) -> str:
        return self._save_dir if self._save_dir is not None else os.getcwd()

    @property
    def tracking_uri(self) -> str:
        if self._tracking_uri:
            return self._tracking_uri
        return "sqlite:///" + os.path.abspath(os.path.join(self.save_dir, "mlflow.db"))

    @property
    def name(self) -> str:
        """The experiment id (Lightning's ``MLFlowLogger.name``; the experiment is created on first use)."""
        self.experiment  # noqa: B018  (creates the experiment and the run)
        assert self._experiment_id is not None
        return str(self._experiment_id)

    @property
    def log_dir(self) -> None:
        """None: MLflow keeps a run in its tracking store, not in a folder of its own (as in Lightning)."""
        return None

    @property
    def experiment(self) -> Any:
        """The ``MlflowClient`` (the run is created on first use)."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            if self.tracking_uri.startswith("sqlite:///"):
                os.makedirs(os.path.dirname(self.tracking_uri[len("sqlite:///"):]) or ".", exist_ok=True)
            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        if self._experiment_id is None:
            self._run_id = self._create_run(self._client)
        return self._client

    def _create_run(self, client: Any) -> str:
        if self._run_id is not None:  # a run given by id: its experiment
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
            return self._run_id
        found = client.get_experiment_by_name(self.experiment_name)
        if found is not None:
            self._experiment_id = found.experiment_id
        else:
            self._experiment_id = client.create_experiment(self.experiment_name,
                                                           artifact_location=self.artifact_location)
        tags = {k: str(v) for k, v in self.tags.items()}
        if self.run_name:
            tags.setdefault("mlflow.runName", self.run_name)
        return str(client.create_run(self._experiment_id, tags=tags, run_name=self.run_name).info.run_id)

    @property
    def run_id(self) -> str:
        self.experiment  # noqa: B018  (creates the run)
        assert self._run_id is not None
        return self._run_id

    @property
    def version(self) -> str:
        return self.run_id

    # -- hooks -------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)  # save_dir is known before any callback asks for the run folder
    def setup(self, trainer: Any) -> None:
        if self._save_dir is None:
            self._save_dir = trainer.default_root_dir

    @hookimpl
    def log_hyperparams(self, params: dict) -> None:
        from mlflow.entities import Param

        flat = _flatten(plain(dict(params)))
        items = [Param(k, str(v)[:_PARAM_LIMIT]) for k, v in flat.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 parameters per batch
            self.experiment.log_batch(self.run_id, params=items[i:i + 100])

    @hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(_key(self.prefix, k), float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), 1000):
            self.experiment.log_batch(self.run_id, metrics=items[i:i + 1000])

    @hookimpl
    def teardown(self, trainer: Any) -> None:
        self.finalize(_STATUS.get(trainer.state.get("status"), "FINISHED"))

    @hookimpl
    def on_exception(self, trainer: Any) -> None:
        self.finalize("KILLED" if trainer.state.get("status") == "interrupted" else "FAILED")

    def save(self) -> None:
        """Nothing to do: every call above is written to the store at once."""

    def finalize(self, status: str = "success") -> None:
        """Mark the run ended with ``status``: Lightning's ``"success"``/``"finished"``/``"failed"`` or MLflow's
        ``FINISHED``, ``FAILED``, ``KILLED``."""
        status = _LIGHTNING_STATUS.get(status, status)
        if self._client is not None and self._run_id is not None:
            self._client.set_terminated(self._run_id, status)


def _key(prefix: str, name: str) -> str:
    name = f"{prefix}-{name}" if prefix else name
    return name.replace("@", "_at_")  # a character MLflow rejects in metric names


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out
