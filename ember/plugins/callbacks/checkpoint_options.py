"""``ModelCheckpoint``'s argument checks and file-name helpers, kept apart from the saving logic.

The error messages follow Lightning's wording where Lightning users match on it (``Must be >= -1``,
``Combination of parameters ...``), so code ported from Lightning reads the same errors.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from datetime import timedelta
from typing import Any

import torch

from ember.core.errors import ConfigurationError


def check_mode(mode: Any) -> str:
    if mode not in ("min", "max"):
        raise ConfigurationError(f"ModelCheckpoint(mode={mode!r}) is invalid: `mode` can be 'min' or 'max' but got "
                                 f"{mode}.")
    return mode


def check_top_k(save_top_k: Any, monitor: str | None) -> int:
    if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
        raise ConfigurationError(f"ModelCheckpoint(save_top_k={save_top_k!r}) is invalid. Must be >= -1 "
                                 "(-1 keeps every checkpoint, 0 none).")
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise ConfigurationError(f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid setting: "
                                 "without a monitored metric there is no ranking to keep the top k by. Pass "
                                 "monitor=... or save_top_k in (-1, 0, 1).")
    return save_top_k


def _optional_count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"ModelCheckpoint({name}={value!r}) is invalid. Must be >= 0 (or None).")
    return value


def schedule(every_n_train_steps: Any, every_n_epochs: Any,
             train_time_interval: Any) -> tuple[int | None, int | None, timedelta | None]:
    """The checked ``every_n_train_steps``, ``every_n_epochs``, ``train_time_interval`` (default: every epoch)."""
    every_steps = _optional_count("every_n_train_steps", every_n_train_steps)
    every_epochs = _optional_count("every_n_epochs", every_n_epochs)
    if isinstance(train_time_interval, (int, float)) and not isinstance(train_time_interval, bool):
        train_time_interval = timedelta(seconds=train_time_interval)
    if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
        raise ConfigurationError(f"ModelCheckpoint(train_time_interval={train_time_interval!r}) is invalid: "
                                 "expected a datetime.timedelta or seconds.")
    given = [n for n, v in (("every_n_train_steps", every_steps), ("every_n_epochs", every_epochs),
                            ("train_time_interval", train_time_interval)) if v]
    if len(given) > 1:
        raise ConfigurationError(
            f"ModelCheckpoint: Combination of parameters every_n_train_steps={every_steps}, every_n_epochs="
            f"{every_epochs} and train_time_interval={train_time_interval} is invalid: {' and '.join(given)} are "
            "mutually exclusive, pass one of them.")
    if not given and every_steps is None and every_epochs is None and train_time_interval is None:
        every_epochs = 1
    return every_steps, every_epochs, train_time_interval


def sibling_runs(old: str, new: str) -> bool:
    """``.../<name>/<run a>/checkpoints`` and ``.../<name>/<run b>/checkpoints``: two runs of one name."""
    old_run, new_run = os.path.dirname(os.path.abspath(old)), os.path.dirname(os.path.abspath(new))
    return os.path.basename(old) == os.path.basename(new) and os.path.dirname(old_run) == os.path.dirname(new_run)


def number(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def format_name(template: str, metrics: dict[str, Any], insert_names: bool, equals: str) -> str:
    """Fill ``{name}`` / ``{name:fmt}`` fields; names may contain dots and slashes (``{val/loss:.2f}``)."""
    pattern, names = _prepared(template, insert_names, equals)
    values = {}
    for name in names:  # read to the host only the values the name uses
        value = metrics.get(name, 0)
        values[name] = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
    return pattern.format(values)


@functools.lru_cache(maxsize=64)
def _prepared(template: str, insert_names: bool, equals: str) -> tuple[str, tuple[str, ...]]:
    """``template`` as a ``str.format`` pattern over one mapping (``{0[val/loss]:.2f}``), and the names it reads:
    worked out once per template, not at every save."""
    names = sorted(set(re.findall(r"\{([^{}:]+)(?::[^{}]*)?\}", template)), key=len, reverse=True)
    for name in names:
        pattern = re.compile(r"\{" + re.escape(name) + r"(:[^{}]*)?\}")
        prefix = f"{name}{equals}" if insert_names else ""

        def field(m: re.Match[str], p: str = prefix, n: str = name) -> str:
            return p + "{0[" + n + "]" + (m.group(1) or "") + "}"

        template = pattern.sub(field, template)
    return template, tuple(names)


def write_best_k_yaml(best_k_models: dict[str, Any], filepath: str | os.PathLike) -> None:
    """``{path: score}`` as YAML, the scores as plain numbers (atomically: a temporary file renamed over it)."""
    import yaml  # only here: YAML is needed by this export alone

    scores = {str(path): number(score) for path, score in best_k_models.items()}
    target = os.fspath(filepath)
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(scores, f)
    os.replace(tmp, target)


def newest_file(dirpath: str | None, template: str) -> str | None:
    """The newest file of ``dirpath`` whose name fits ``template`` (``{...}`` fields match anything)."""
    if dirpath is None or not os.path.isdir(dirpath):
        return None
    parts = re.split(r"\{[^}]*\}", template)
    pattern = re.compile(".*?".join(map(re.escape, parts)) + "$")
    found = [os.path.join(dirpath, f) for f in os.listdir(dirpath) if pattern.match(f) and not f.startswith(".")]
    return max(found, key=os.path.getmtime) if found else None


def not_ours(callback: Any, trainer: Any, path: str) -> str:
    """Why ``callback`` must not delete ``path`` ("" when it may): a file outside its directory, the file the run
    resumed from, or one this run did not write."""
    dirpath = callback.dirpath
    if not dirpath:
        return f"it is outside this callback's directory {dirpath}"
    # A name the callback made is in its directory as written; others are compared with links resolved.
    if os.path.dirname(path) != dirpath and os.path.dirname(os.path.realpath(path)) != os.path.realpath(dirpath):
        return f"it is outside this callback's directory {dirpath}"
    resumed = getattr(trainer, "ckpt_path", None)
    if isinstance(resumed, (str, os.PathLike)) and os.path.realpath(resumed) == os.path.realpath(path):
        return "the run resumed from it"
    if path not in callback.owned_paths:
        return "this run did not write it"
    return ""


#: What ``ModelCheckpoint`` records of its saves (put back when a failure drops a save it asked for).
BOOKKEEPING = ("best_k_models", "kth_best_model_path", "kth_value", "best_model_path", "best_model_score",
               "current_score", "last_model_path", "_last_global_step_saved", "_last_path_saved")


def bookkeeping(callback: Any) -> dict[str, Any]:
    return {name: copy.copy(getattr(callback, name)) for name in BOOKKEEPING}
