"""Trainer arguments read from outside the call, argument forms that need parsing, and what `barebones` and
ambiguous limits mean.

- ``PL_TRAINER_<NAME>`` environment variables give defaults for the Trainer's arguments (Lightning's convention,
  so a job script written for Lightning configures ember the same way); an argument passed explicitly wins.
- A time-based ``val_check_interval`` (``"DD:HH:MM:SS"``, a ``datetime.timedelta`` or a dict of its keyword
  arguments) is turned into seconds here.
"""

from __future__ import annotations

import ast
import datetime
import logging
import os
import warnings
from collections.abc import Iterable
from typing import Any

from ember.core.errors import ConfigurationError

#: The environment variable giving the default of a Trainer argument: ``PL_TRAINER_MAX_STEPS`` for ``max_steps``.
ENV_TEMPLATE = "PL_TRAINER_{}"

_log = logging.getLogger("ember")


def env_defaults(names: Iterable[str]) -> dict[str, Any]:
    """The defaults the environment sets for ``names``: each non-empty ``PL_TRAINER_<NAME>`` value read as a
    Python literal (``"7"`` -> 7, ``"False"`` -> False), or kept as a string when it is not one."""
    found: dict[str, Any] = {}
    for name in names:
        raw = os.environ.get(ENV_TEMPLATE.format(name.upper()))
        if raw is None or raw == "":
            continue
        try:
            found[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            found[name] = raw
    return found


def is_time_interval(value: Any) -> bool:
    """Whether ``value`` is a ``val_check_interval`` measured in wall-clock time."""
    return isinstance(value, (str, dict, datetime.timedelta))


def interval_seconds(value: Any) -> float:
    """The seconds of a time-based ``val_check_interval``: a ``timedelta``, a dict of ``timedelta`` keyword
    arguments, or a ``"DD:HH:MM:SS"`` string of whole numbers. Raises :class:`ConfigurationError` otherwise."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, dict):
        try:
            seconds = datetime.timedelta(**value).total_seconds()
        except TypeError as exc:
            raise ConfigurationError(f"Trainer(val_check_interval={value!r}) is invalid: a dict must hold "
                                     f"datetime.timedelta's keyword arguments (days, hours, minutes, seconds, ...): "
                                     f"{exc}.") from None
    elif isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4:
            raise ConfigurationError(f"Trainer(val_check_interval={value!r}) is invalid: a time interval is written "
                                     "'DD:HH:MM:SS' (days, hours, minutes, seconds).")
        try:
            days, hours, minutes, secs = (int(p) for p in parts)
        except ValueError:
            raise ConfigurationError(f"Trainer(val_check_interval={value!r}) is invalid: each part of "
                                     "'DD:HH:MM:SS' must be a whole number.") from None
        seconds = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=secs).total_seconds()
    else:
        raise ConfigurationError(f"Trainer(val_check_interval={value!r}) is invalid: expected a fraction, a number "
                                 "of batches, or a time interval ('DD:HH:MM:SS', timedelta or dict).")
    if seconds <= 0:
        raise ConfigurationError(f"Trainer(val_check_interval={value!r}) is invalid: a time interval must be longer "
                                 "than zero.")
    return seconds


def say_whole_limits(passed: dict[str, Any]) -> None:
    """An info line for a limit given as exactly 1 or 1.0, which reads like either "one batch" or "all of them"
    (Lightning's message, which code written for it looks for)."""
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                 "overfit_batches", "val_check_interval"):
        value = passed.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != 1:
            continue
        if name == "val_check_interval":
            when = "after every training batch" if isinstance(value, int) else "at the end of each training epoch"
            _log.info("`Trainer(%s=%r)` was configured so validation will run %s.", name, value, when)
            continue
        amount = "1 batch" if isinstance(value, int) else "100% of the batches"
        per = "" if name == "overfit_batches" else " per epoch"
        _log.info("`Trainer(%s=%r)` was configured so %s%s will be used.", name, value, amount, per)


#: What ``barebones=True`` switches off among core's arguments (Lightning's list); plugins' switches that are on
#: by default (progress bar, model summary, checkpointing, ...) are switched off too.
BAREBONES_OFF = {"logger": False, "num_sanity_val_steps": 0, "fast_dev_run": False, "detect_anomaly": False,
                  "profiler": None}


def overfit_limits(kwargs: dict[str, Any]) -> None:
    """``overfit_batches`` sets ``limit_train_batches`` and ``limit_val_batches``; a limit passed with it is
    ignored, as in Lightning, with a warning (Lightning says nothing)."""
    overfit = kwargs["overfit_batches"]
    for limit in ("limit_train_batches", "limit_val_batches"):
        if kwargs.get(limit) is not None and kwargs[limit] != overfit:
            warnings.warn(f"Trainer(overfit_batches={overfit!r}) sets {limit} itself: {limit}={kwargs[limit]!r} "
                          f"is ignored and {overfit!r} used, as in Lightning; pass only one of the two.",
                          UserWarning, stacklevel=4)
        kwargs[limit] = overfit


def barebones(kwargs: dict[str, Any], declared: dict[str, Any]) -> None:
    """``barebones=True``: the loop alone, for measuring it: no logger, sanity check, anomaly detection or
    profiler, and none of the plugins a Trainer argument switches on by default; asking for one of them as well
    is an error (as in Lightning)."""
    off = dict(BAREBONES_OFF)
    off.update({name: False for name, option in declared.items() if option.switches and option.default is True})
    for name, value_off in off.items():
        value = kwargs.get(name, value_off)
        if value not in (value_off, None, False):
            raise ConfigurationError(f"Trainer(barebones=True) runs without {name}, but `Trainer({name}={value!r})` "
                                     "was passed; remove one of them.")
        kwargs[name] = value_off
    every = kwargs.pop("log_every_n_steps", None)  # nothing is logged: trainer.log_every_n_steps reads 0
    if every not in (None, 0):
        raise ConfigurationError(f"Trainer(barebones=True) logs nothing, but `Trainer(log_every_n_steps={every!r})` "
                                 "was passed; remove one of them.")
    _log.info("Trainer(barebones=True): running in `Trainer(barebones=True)` mode, the loop alone (to measure its "
              "overhead); off: %s, log_every_n_steps.", ", ".join(off))
