"""``lightning.pytorch.core.saving``: reading and writing a run's hyperparameters as ``hparams.yaml`` (what
ember's loggers write beside their logs) or as a two-column ``tags.csv``.

Files are read with ``yaml.safe_load``: a hyperparameter file, like a checkpoint, never runs code when loaded.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["load_hparams_from_tags_csv", "load_hparams_from_yaml", "save_hparams_to_tags_csv",
           "save_hparams_to_yaml"]


def _as_dict(hparams: Any) -> dict[str, Any]:
    if isinstance(hparams, Namespace):
        return dict(vars(hparams))
    if _is_omegaconf(hparams):
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(hparams, resolve=True))  # type: ignore[arg-type]
    if isinstance(hparams, Mapping):
        return dict(hparams)
    raise TypeError(f"hparams must be a dict, a Namespace or an OmegaConf container, not {type(hparams).__name__}.")


def _is_omegaconf(value: Any) -> bool:
    return type(value).__module__.startswith("omegaconf")


def _parse(text: str) -> Any:
    """A value read back from ``tags.csv``: a Python literal where it is one, else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def save_hparams_to_yaml(config_yaml: str | os.PathLike, hparams: Any, use_omegaconf: bool = True) -> None:
    """Write ``hparams`` (a dict, ``Namespace``, ``AttributeDict`` or OmegaConf container) to ``config_yaml``.

    An enum member is written as its name; a value YAML cannot hold safely (a dtype, a module) is left out with a
    warning naming it. An OmegaConf container is written by OmegaConf itself when ``use_omegaconf``.
    """
    import yaml

    folder = os.path.dirname(os.fspath(config_yaml))
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Cannot write {os.fspath(config_yaml)!r}: its folder does not exist.")
    if use_omegaconf and _is_omegaconf(hparams):
        from omegaconf import OmegaConf

        OmegaConf.save(hparams, config_yaml, resolve=True)
        return
    kept: dict[str, Any] = {}
    for key, value in _as_dict(hparams).items():
        if isinstance(value, Enum):
            value = value.name
        try:
            yaml.safe_dump(value)
        except yaml.YAMLError:
            warnings.warn(f"Skipping {key!r} parameter: its value ({type(value).__name__}) cannot be written to "
                          f"YAML safely.", UserWarning, stacklevel=2)
            continue
        kept[key] = value
    with open(config_yaml, "w", encoding="utf-8") as f:
        yaml.safe_dump(kept, f, sort_keys=False)


def load_hparams_from_yaml(config_yaml: str | os.PathLike, use_omegaconf: bool = True) -> Any:
    """The hyperparameters in ``config_yaml`` (a dict; an OmegaConf ``DictConfig`` where ``use_omegaconf`` and
    omegaconf is installed). A missing file gives a warning and an empty dict."""
    import yaml

    if not os.path.isfile(config_yaml):
        warnings.warn(f"Missing hyperparameter file {os.fspath(config_yaml)!r}: no hyperparameters loaded.",
                      UserWarning, stacklevel=2)
        return {}
    with open(config_yaml, encoding="utf-8") as f:
        hparams = yaml.safe_load(f) or {}
    if use_omegaconf and importlib.util.find_spec("omegaconf") is not None:
        from omegaconf import OmegaConf

        return OmegaConf.create(hparams)
    return hparams


def save_hparams_to_tags_csv(tags_csv: str | os.PathLike, hparams: Any) -> None:
    """Write ``hparams`` to ``tags_csv`` as ``key,value`` rows (values as their Python ``repr``)."""
    folder = os.path.dirname(os.fspath(tags_csv))
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Cannot write {os.fspath(tags_csv)!r}: its folder does not exist.")
    with open(tags_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["key", "value"])
        for key, value in _as_dict(hparams).items():
            writer.writerow([key, repr(value)])


def load_hparams_from_tags_csv(tags_csv: str | os.PathLike) -> dict[str, Any]:
    """The hyperparameters in ``tags_csv`` (see :func:`save_hparams_to_tags_csv`); a missing file gives a warning
    and an empty dict."""
    if not os.path.isfile(tags_csv):
        warnings.warn(f"Missing hyperparameter file {os.fspath(tags_csv)!r}: no hyperparameters loaded.",
                      UserWarning, stacklevel=2)
        return {}
    with open(tags_csv, newline="", encoding="utf-8") as f:
        return {row["key"]: _parse(row["value"]) for row in csv.DictReader(f)}
