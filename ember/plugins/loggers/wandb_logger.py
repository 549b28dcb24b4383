"""``logger.wandb``: metrics and hyperparameters to Weights & Biases.

Needs ``wandb``: ``pip install 'ember[wandb]'``. ``offline=True`` (or ``WANDB_MODE=offline``) needs no account:
the run is written under ``<save_dir>/wandb/offline-run-*`` and can be uploaded later with ``wandb sync``.
"""

from __future__ import annotations

import os
from typing import Any

from ember.hookspecs import hookimpl
from ember.plugins._shared import packages
from ember.plugins.loggers import plain

#: The metric every other metric is plotted against (so validation values logged at a step already used by
#: training metrics are kept, which W&B's own ``step`` would drop).
STEP_METRIC = "trainer/global_step"


class WandbLogger:
    """Log through ``wandb.init(...)``'s run (``experiment``; created on first use, on global rank 0 only, since
    only rank 0 logs). Lightning's arguments; ``**init_kwargs`` go to ``wandb.init`` (``entity``, ``tags``,
    ``group``, ``notes``, ``mode``, ...).

    :param name: the run's display name.
    :param save_dir: the folder ``wandb/`` goes in; default the Trainer's ``default_root_dir``.
    :param version: the run id (``id`` also accepted), to continue a run; default a new one.
    :param offline: write locally, upload nothing (``wandb sync`` later).
    :param project: the W&B project (default ``ember``).
    :param prefix: put before every metric name (``prefix-name``).
    :param experiment: an existing ``wandb`` run to log into.

    Each ``trainer.fit``/``validate``/``test`` ends the W&B run when it ends (exit code 1 if it failed); a later
    call with the same logger continues the same run id (``resume="allow"``).
    """

    identity = "logger.wandb"
    role = "logger"

    def __init__(self, name: str | None = None, save_dir: str | os.PathLike | None = None, version: str | None = None,
                 offline: bool = False, project: str | None = None, prefix: str = "", experiment: Any = None,
                 **init_kwargs: Any) -> None:
        self.check_available()
        self._name = name
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._id = version or init_kwargs.pop("id", None)
        self.offline = offline
        self.project = project or os.environ.get("WANDB_PROJECT", "ember")
        self.prefix = prefix
        self.init_kwargs = init_kwargs
        self._run = experiment

    @staticmethod
    def check_available(config: Any = None) -> None:
        packages.require("wandb", "logger 'wandb'", "wandb", alternative="logger='csv'")

    @property
    def save_dir(self) -> str:
        return self._save_dir if self._save_dir is not None else os.getcwd()

    @property
    def name(self) -> str:
        """The W&B project (Lightning's ``WandbLogger.name``; the run's display name is ``experiment.name``)."""
        return self.project

    @property
    def log_dir(self) -> str:
        """``save_dir``: W&B keeps each run in ``<save_dir>/wandb/``."""
        return self.save_dir

    @property
    def version(self) -> str | None:
        """The run id (known once the run exists, or when given)."""
        return self._run.id if self._run is not None else self._id

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run."""
        if self._run is None:
            import wandb

            os.makedirs(self.save_dir, exist_ok=True)
            kwargs: dict[str, Any] = {"project": self.project, "name": self._name, "dir": self.save_dir,
                                      "id": self._id, "resume": "allow", **self.init_kwargs}
            if self.offline:
                kwargs["mode"] = "offline"
            self._run = wandb.init(**kwargs)
            self._id = self._run.id
            self._run.define_metric(STEP_METRIC)
            self._run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        return self._run

    # -- hooks -------------------------------------------------------------------------------------------
    @hookimpl(tryfirst=True)  # save_dir is known before any callback asks for the run folder
    def setup(self, trainer: Any) -> None:
        if self._save_dir is None:
            self._save_dir = trainer.default_root_dir

    @hookimpl
    def log_hyperparams(self, params: dict) -> None:
        self.experiment.config.update(plain(dict(params)), allow_val_change=True)

    @hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        key = (lambda k: f"{self.prefix}-{k}") if self.prefix else (lambda k: k)
        self.experiment.log({**{key(k): v for k, v in metrics.items()}, STEP_METRIC: step})

    @hookimpl
    def teardown(self, trainer: Any) -> None:
        self.finalize("failed" if trainer.state.get("status") in ("failed", "interrupted") else "success")

    @hookimpl
    def on_exception(self) -> None:
        self.finalize("failed")

    def save(self) -> None:
        """Nothing to do: W&B writes in the background; :meth:`finalize` flushes."""

    def finalize(self, status: str | int = "success") -> None:
        """End the W&B run (flushes everything to ``<save_dir>/wandb``): exit code 0 for ``"success"`` or
        ``"finished"``, 1 for anything else (an int is used as the exit code)."""
        exit_code = status if isinstance(status, int) else int(status not in ("success", "finished"))
        if self._run is not None:
            self._run.finish(exit_code=exit_code)
            self._run = None
