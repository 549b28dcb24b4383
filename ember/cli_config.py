"""``ember fit | validate | test | predict``: the model, the data and the Trainer from config files and flags,
parsed by jsonargparse with LightningCLI's conventions::

    ember fit --config run.yaml --trainer.max_epochs 5 --model.lr 3e-4
    ember fit --model my_pkg.models.Classifier --data my_pkg.data.Digits --print_config > run.yaml

A config file (YAML, or TOML by its ``.toml`` suffix) has up to five top-level keys: ``seed_everything``,
``trainer`` (every Trainer argument, plugins' included: :func:`ember.core.hooks.options.declared_options`), ``model``
and ``data`` (``class_path`` and ``init_args``, typed by the class's signature) and ``ckpt_path``. Files
(``--config``, several allowed) and flags apply in the order given, later ones winning. ``model`` is any ``torch.nn.Module``;
``data`` any class with a ``*_dataloader()`` method (:class:`DataModule`). ``trainer.callbacks``, ``plugins``,
``logger`` and ``profiler`` hold plugin names (``lr-monitor``) or ``{class_path, init_args}``, where
``class_path`` may be a plugin's name too. ``package.module:Class`` is read as ``package.module.Class``.
Errors are :class:`~ember.cli_registry.CLIError`: one line, naming the key, with the closest valid one
(:mod:`ember.cli_explain`).
"""

from __future__ import annotations

import abc
import argparse
import functools
import importlib
import inspect
import operator
import os
import random
import re
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ember.cli_explain import explain, missing
from ember.cli_registry import CLIError, command, load_toml
from ember.core.errors import EmberError, UntrainedWeightsWarning, suggest
from ember.core.hooks.options import Option, declared_options
from ember.hookspecs import hookimpl

if TYPE_CHECKING:
    from jsonargparse import ArgumentParser, Namespace

STAGES = {
    "fit": "train a model (config files and/or flags); writes logs and checkpoints",
    "validate": "run one validation epoch and print the metrics",
    "test": "run one test epoch and print the metrics",
    "predict": "run predict_step over the data",
}
#: Trainer arguments whose entries may be ``{class_path, init_args}``: the role their plugin names belong to.
PLUGIN_ARGS = {"callbacks": "callback", "plugins": None, "logger": "logger", "profiler": "profiler",
               "accelerator": "accelerator", "strategy": "strategy", "precision": "precision",
               "environment": "environment", "checkpoint_io": "checkpoint_io"}
_DATALOADERS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")
_COLON_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MODE = "ember"  # jsonargparse's parser mode: its YAML loader, reading package.module:Class paths too


class Model(abc.ABC):  # noqa: B024  (nothing to implement: __subclasshook__ decides)
    """What ``model`` may be: any ``torch.nn.Module`` (with the step methods the command runs)."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        import torch

        return issubclass(other, torch.nn.Module)


class DataModule(abc.ABC):  # noqa: B024  (nothing to implement: __subclasshook__ decides)
    """What ``data`` may be: any class with a ``train_dataloader``, ``val_dataloader``, ``test_dataloader`` or
    ``predict_dataloader`` method (ember's DataModules need no base class)."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        from ember.core.hooks.positional import is_base_hook

        return any(callable(method) and not is_base_hook(method)
                   for method in (getattr(other, name, None) for name in _DATALOADERS))


# ---------------------------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------------------------

_SIMPLE_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "None": type(None)}


def keep_unset(parser: Any, method: str) -> dict[str, bool]:
    """The keyword that makes jsonargparse's ``dump``/``save`` keep the entries whose value is None: ``skip_unset``
    in the releases that have it, ``skip_none`` in those before (4.49)."""
    cls = type(parser)
    function = getattr(cls, f"_unpatched_{method}", None) or getattr(cls, method)  # a release may wrap it
    return {"skip_unset" if "skip_unset" in inspect.signature(function).parameters else "skip_none": False}


def option_type(option: Option) -> Any:
    """The type of a Trainer argument for jsonargparse, from its declared type (``"int | float | None"``):
    a union of int, float, str, bool and None as such (so ``3e-4`` is a float), anything else ``Any`` (a value
    read as YAML, checked by the Trainer)."""
    names = [n.strip() for n in option.type.split("|")]
    if not all(n in _SIMPLE_TYPES for n in names):
        return Any
    types = [_SIMPLE_TYPES[n] for n in names]
    if option.default is None and type(None) not in types:
        types.append(type(None))
    return functools.reduce(operator.or_, types)


def _default(option: Option) -> Any:
    return list(option.default) if isinstance(option.default, tuple) else option.default


def _normalise(value: Any) -> Any:
    """``package.module:Class`` -> ``package.module.Class`` in ``class_path`` values and in ``model``/``data``
    given as a class path alone."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("class_path", "model", "data") and isinstance(item, str) and _COLON_PATH.match(item):
                item = item.replace(":", ".")
            out[key] = _normalise(item)
        return out
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    return value


def _register_loader() -> None:
    import yaml
    from jsonargparse import get_loader, set_loader

    yaml_load = get_loader("yaml")
    set_loader(_MODE, lambda text: _normalise(yaml_load(text)), exceptions=(yaml.YAMLError,))


def build_parser(stage: str) -> ArgumentParser:
    """The jsonargparse parser of ``ember <stage>``."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    _register_loader()
    p = ArgumentParser(prog=f"ember {stage}", description=STAGES[stage] + ". See docs/cli.md.", parser_mode=_MODE,
                       exit_on_error=False, allow_abbrev=False)
    p.add_argument("-c", "--config", action=ActionConfigFile,
                   help="a YAML (or .toml) config file; repeat to merge several, later ones win")
    p.add_argument("--seed_everything", type=bool | int, default=True,
                   help="seed python, numpy and torch before anything is built: an int, true (a random seed, "
                        "written into the saved config.yaml) or false (no seeding)")
    group = p.add_argument_group("Trainer arguments", "Every Trainer argument, plugins' included (docs/trainer.md)")
    for option in declared_options():
        group.add_argument(f"--trainer.{option.name}", type=option_type(option), default=_default(option),
                           help=option.help or option.name)
    p.add_subclass_arguments(Model, "model", required=False,
                             help="the model: a torch.nn.Module with training_step (package.module.Class)")
    p.add_subclass_arguments(DataModule, "data", required=False,
                             help="the data: a class with *_dataloader() methods (omit it when the model has them)")
    p.add_argument("--ckpt_path", type=str | None, default=None,
                   help="a checkpoint to resume from (fit) or to load the weights of; 'last' or 'best' too")
    return p


def _prepare(argv: list[str]) -> list[str]:
    """TOML config files as YAML text; ``--model package.module:Class`` as a dotted path; ``--print-config``
    as ``--print_config``."""
    out = []
    for i, word in enumerate(argv):
        before = argv[i - 1] if i else ""
        if word == "--print-config" or word.startswith("--print-config="):
            word = word.replace("-config", "_config", 1)
        if before in ("-c", "--config") and word.endswith(".toml") and os.path.isfile(word):
            import yaml

            word = yaml.safe_dump(load_toml(word))
        elif before in ("--model", "--data") and _COLON_PATH.match(word):
            word = word.replace(":", ".")
        elif re.match(r"^--(model|data)=", word) and _COLON_PATH.match(word.split("=", 1)[1]):
            word = word.replace(":", ".")
        out.append(word)
    return out


def parse(stage: str, argv: list[str]) -> tuple[ArgumentParser, Namespace]:
    """The parser and the parsed configuration (files and flags in the order given)."""
    if "" not in sys.path and os.getcwd() not in sys.path:  # class paths resolve from here, as under python -m
        sys.path.insert(0, os.getcwd())
    parser = build_parser(stage)
    try:
        cfg = parser.parse_args(_prepare(argv))
    except argparse.ArgumentError as exc:
        raise CLIError(explain(str(exc), argv)) from exc
    if cfg.model is None:
        raise CLIError(f"ember {stage} needs a model: --model package.module.Class, or 'model:' in a config file.")
    return parser, cfg


# ---------------------------------------------------------------------------------------------------------
# Building the objects
# ---------------------------------------------------------------------------------------------------------


def plugin_class_path(name: str, role: str | None, where: str) -> str:
    """The import path of a plugin named ``name`` (``early-stopping``, ``callback.early-stopping``) or ``name``
    itself when it is an import path (``my_pkg.callbacks.Custom`` or ``my_pkg.callbacks:Custom``)."""
    from ember.core.hooks import discovery

    found = discovery.discover().plugins
    candidates = [name, f"{role}.{name}"] if role else [name, *(i for i in found if i.split(".", 1)[1] == name)]
    for identity in candidates:
        if identity in found:
            return discovery.only(identity, found[identity]).value.replace(" ", "").replace(":", ".")
    if "." in name or ":" in name:
        return name.replace(":", ".")
    names = sorted(i.split(".", 1)[1] for i in found if role is None or i.startswith(f"{role}."))
    raise CLIError(f"{where}: unknown {role or 'plugin'} {name!r}.{suggest(name, names)} "
                   f"Installed: {', '.join(names)} (`ember plugins` lists them), or give a class path.")


def _is_class_path(name: str) -> bool:
    """``package.module:Class``, or a dotted name whose first part is no plugin role (``callback.timer`` is an
    identity, ``my_pkg.callbacks.Custom`` a class)."""
    from ember.core.hooks import discovery

    if ":" in name:
        return True
    roles = {identity.split(".", 1)[0] for identity in discovery.discover().plugins}
    return "." in name and name.split(".", 1)[0] not in roles


def plugin_entry(value: Any, role: str | None, where: str) -> Any:
    """A ``trainer.callbacks``/``plugins``/``logger``/... entry: a name or identity stays a string (the Trainer
    looks it up, with a suggestion for a typo); ``package.module:Class`` and ``{class_path, init_args}`` (whose
    ``class_path`` may be a plugin's name) are built here, the arguments typed by the class's signature."""
    if isinstance(value, str) and not _is_class_path(value):
        return value
    if isinstance(value, str):
        value = {"class_path": value}
    if not isinstance(value, Mapping) or "class_path" not in value:
        if isinstance(value, Mapping):
            keys = list(value)
            raise CLIError(f"{where}: expected {{class_path: ..., init_args: {{...}}}}, got the keys {keys}."
                           f"{suggest(keys[0], ['class_path', 'init_args']) if keys else ''}")
        return value
    unknown = [k for k in value if k not in ("class_path", "init_args")]
    if unknown:
        raise CLIError(f"{where}: unknown key {unknown[0]!r}.{suggest(unknown[0], ['class_path', 'init_args'])} "
                       "Valid keys: class_path, init_args.")
    path = plugin_class_path(str(value["class_path"]), role, where)
    return instantiate({"class_path": path, "init_args": dict(value.get("init_args") or {})}, _class_of(path, where),
                       where)


def instantiate(spec: Mapping[str, Any], base: type, where: str) -> Any:
    """Build ``{class_path, init_args}`` (a subclass of ``base``), its arguments typed by its signature."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False, parser_mode=_MODE)
    parser.add_argument("--entry", type=base)
    try:
        cfg = parser.parse_object({"entry": dict(spec)})
    except argparse.ArgumentError as exc:
        raise CLIError(explain(str(exc), []).replace("entry:", f"{where}:", 1)) from exc
    return parser.instantiate(cfg).entry


def _class_of(path: str, where: str) -> type:
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except AttributeError as exc:
        raise CLIError(f"{where}: {missing(module, name)}") from exc
    except (ImportError, ValueError) as exc:
        raise CLIError(f"{where}: cannot import {path!r}: {exc}. Is the package installed, or its folder on "
                       "PYTHONPATH?") from exc
    if not isinstance(cls, type):
        raise CLIError(f"{where}: {path!r} is {type(cls).__name__}, not a class.")
    return cls


def trainer_kwargs(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer's keyword arguments from the parsed ``trainer`` section (plugin entries built)."""
    kwargs = dict(trainer)
    for key, role in PLUGIN_ARGS.items():
        value = kwargs.get(key)
        if isinstance(value, list):
            kwargs[key] = [plugin_entry(v, role, f"trainer.{key}[{i}]") for i, v in enumerate(value)]
        elif value is not None:
            kwargs[key] = plugin_entry(value, role, f"trainer.{key}")
    return kwargs


class SaveConfig:
    """Writes the run's configuration to ``<log_dir>/config.yaml`` when ``fit`` starts (global rank 0), so a
    run can be repeated with ``ember fit --config <log_dir>/config.yaml``."""

    identity = "cli.save-config"

    def __init__(self, text: str) -> None:
        self.text = text
        self.path: str | None = None

    @hookimpl(trylast=True)
    def setup(self, trainer: Any, stage: str) -> None:  # trylast: after the loggers fixed their folder
        if stage != "fit" or not trainer.is_global_zero:
            return
        os.makedirs(trainer.log_dir, exist_ok=True)
        self.path = os.path.join(trainer.log_dir, "config.yaml")
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(self.text)


def build(parser: ArgumentParser, cfg: Namespace, stage: str) -> tuple[Any, Any, Any]:
    """The model, the data (or None) and the Trainer of a parsed configuration. Seeds first."""
    import ember

    if cfg.seed_everything is True:  # as LightningCLI: a seed drawn now (or the job's), saved with the config
        seed = os.environ.get("EMBER_GLOBAL_SEED")
        cfg.seed_everything = int(seed) if seed is not None else random.randrange(2**32)
    if cfg.seed_everything is not False:
        ember.seed_everything(cfg.seed_everything)
    try:  # one by one: the Trainer's arguments hold specs that are plugin names, built by trainer_kwargs
        model = instantiate(cfg.model.as_dict(), Model, "model")
        data = None if cfg.data is None else instantiate(cfg.data.as_dict(), DataModule, "data")
        kwargs = trainer_kwargs(cfg.trainer.as_dict())
        if stage == "fit":
            text = parser.dump(cfg, **keep_unset(parser, "dump"))
            plugins = kwargs.get("plugins") or []
            kwargs["plugins"] = [*(plugins if isinstance(plugins, list) else [plugins]), SaveConfig(text)]
        return model, data, ember.Trainer(**kwargs)
    except CLIError:
        raise
    except EmberError as exc:  # a value the Trainer or a class refuses: still the command line's fault
        raise CLIError(str(exc)) from exc


def run(stage: str, argv: list[str]) -> int:
    parser, cfg = parse(stage, argv)
    model, data, trainer = build(parser, cfg, stage)
    if stage == "fit":
        trainer.fit(model, datamodule=data, ckpt_path=cfg.ckpt_path)
        return 130 if trainer.interrupted else 0
    # A command never evaluates weights of unknown origin: the Trainer's warning becomes a refusal here.
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrainedWeightsWarning)
        try:
            predictions = getattr(trainer, stage)(model, datamodule=data, ckpt_path=cfg.ckpt_path)
        except UntrainedWeightsWarning as refused:
            raise CLIError(f"ember {stage} stops rather than evaluate weights that may be untrained: {refused}") from None
    if stage in ("validate", "test"):
        return 0
    count = len(predictions) if isinstance(predictions, list) else 0
    print(f"predict: {count} batches of predictions (add the 'prediction-writer' callback to save them).")
    return 0


def _register(stage: str) -> None:
    @command(stage, STAGES[stage], raw=True)
    def _run(argv: list[str]) -> int:
        return run(stage, argv)


for _stage in STAGES:
    _register(_stage)
