"""Trainer arguments read from outside the call, and argument forms that need parsing.

- ``PL_TRAINER_<NAME>`` environment variables give defaults for the Trainer's arguments (Lightning's convention,
  so a job script written for Lightning configures ember the same way); an argument passed explicitly wins.
- A time-based ``val_check_interval`` (``"DD:HH:MM:SS"``, a ``datetime.timedelta`` or a dict of its keyword
  arguments) is turned into seconds here.
"""

from __future__ import annotations

import ast
import datetime
import os
from collections.abc import Iterable
from typing import Any

from ember.core.errors import ConfigurationError

#: The environment variable giving the default of a Trainer argument: ``PL_TRAINER_MAX_STEPS`` for ``max_steps``.
ENV_TEMPLATE = "PL_TRAINER_{}"


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
