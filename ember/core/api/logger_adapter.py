"""A logger object that answers none of ember's hooks, made to work as Lightning's Trainer would use it.

``Trainer(logger=obj)`` takes any object with a ``log_metrics`` method. An ember logger plugin answers the
``log_metrics``/``log_hyperparams`` hooks itself (``@ember.hookimpl``; Lightning's ``Logger`` base does it for its
subclasses); an object that answers none of ember's hooks (a duck-typed logger, a ``unittest.mock.Mock`` standing in
for one) would be given nothing. :class:`LoggerAdapter` is registered in its place: it calls the object's methods
by Lightning's names, when Lightning's Trainer does: ``log_metrics(metrics=..., step=...)`` then ``save()`` with
each row; ``log_hyperparams(params)`` (where hyperparameters were saved) then ``log_graph(module)`` and ``save()``
at each entry point; ``finalize("success")`` at the end of a run and ``finalize("failed")`` after an exception.
``trainer.logger``/``trainer.loggers`` give the object itself.
"""

from __future__ import annotations

from typing import Any

from ember.core.hooks.class_hooks import IMPL_MARK
from ember.hookspecs import hookimpl


class LoggerAdapter:
    """Calls a logger object's methods from ember's logger hooks (see the module's docstring)."""

    role = "logger"

    def __init__(self, logger: Any) -> None:
        #: The object given in ``Trainer(logger=...)``: what ``trainer.loggers`` shows.
        self.logger = logger

    @hookimpl
    def log_metrics(self, metrics: dict, step: int) -> None:
        self.logger.log_metrics(metrics=metrics, step=step)
        self._call("save")

    @hookimpl
    def log_hyperparams(self, trainer: Any, params: dict, saved: bool) -> None:
        if saved:
            self.logger.log_hyperparams(params)
        module = getattr(trainer, "lightning_module", None)
        if module is not None:
            self._call("log_graph", module)
        self._call("save")

    @hookimpl
    def teardown(self, trainer: Any) -> None:
        if trainer.is_global_zero and trainer.state.status not in ("failed", "interrupted"):
            self._call("finalize", "success")

    @hookimpl
    def on_exception(self, trainer: Any) -> None:
        if trainer.is_global_zero:
            self._call("finalize", "failed")

    def _call(self, name: str, *args: Any) -> None:
        method = getattr(self.logger, name, None)
        if callable(method):
            method(*args)

    def __repr__(self) -> str:
        return f"LoggerAdapter({self.logger!r})"


def answers_hooks(obj: Any) -> bool:
    """``obj``'s class defines an ember hook implementation (``@ember.hookimpl``)."""
    return any(hasattr(getattr(value, "__func__", value), IMPL_MARK)
               for klass in type(obj).__mro__ for value in vars(klass).values())


def adapted(loggers: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The run's loggers, each object that answers no hook (and is not a class) in a :class:`LoggerAdapter`."""
    return [(identity, logger if isinstance(logger, type) or answers_hooks(logger) else LoggerAdapter(logger))
            for identity, logger in loggers]


def unwrapped(logger: Any) -> Any:
    """The object the user gave for a registered logger plugin."""
    return logger.logger if type(logger) is LoggerAdapter else logger
