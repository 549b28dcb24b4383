"""The logger of a ``fast_dev_run``: it records nothing.

``Trainer(fast_dev_run=...)`` checks that a script runs; it writes no run folder, as it writes no checkpoint. The
loggers the run was given are set aside for it and :class:`NullLogger` stands in their place, so that code which
uses ``trainer.logger`` (``self.logger.experiment.add_histogram(...)`` in a step) runs unchanged and records
nothing. Not an entry point: the Trainer puts it in place itself (a Trainer taken through Lightning's names, Lightning's
``DummyLogger``).
"""

from __future__ import annotations

from typing import Any


class NullExperiment:
    """Takes any call, attribute or item, and records nothing."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> NullExperiment:
        return self

    def __getitem__(self, index: Any) -> NullExperiment:
        return self

    def __repr__(self) -> str:
        return "NullExperiment()"


class NullLogger:
    """A logger without a folder: ``experiment`` takes anything, metrics and hyperparameters go nowhere."""

    role = "logger"

    def __init__(self) -> None:
        self.experiment = NullExperiment()

    name = ""
    version = None  # no run folder
    save_dir = None
    log_dir = None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        return None

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return None

    def save(self) -> None:
        return None

    def finalize(self, status: str) -> None:
        return None

    def __repr__(self) -> str:
        return "NullLogger()"


#: The identity the stand-in has among the run's plugins.
IDENTITY = "logger.null"


def for_run(fast_dev_run: bool | int, loggers: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The run's loggers: those it was given (an object that answers none of ember's hooks in a
    :class:`~ember.core.api.logger_adapter.LoggerAdapter`), or, under ``fast_dev_run``, one stand-in that records
    nothing in their place (none when it was given none)."""
    if not fast_dev_run or not loggers:
        from ember.core.api.logger_adapter import adapted

        return adapted(loggers)
    from ember.core.hooks import options

    factory = options.substitute_for(IDENTITY) or NullLogger
    return [(IDENTITY, factory())]
