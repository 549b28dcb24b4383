"""``ember fit | validate | test | predict``: the model, the data and the Trainer from config files and flags.

::

    ember fit --config run.yaml --trainer.max_epochs 5 --model.hidden 256
    ember fit --model my_pkg.models:Classifier --data my_pkg.data:Digits --print-config > run.yaml

A config file (YAML, or TOML by its ``.toml`` suffix) has up to five top-level keys::

    seed_everything: 0
    trainer: {max_epochs: 5, callbacks: [lr-monitor, {class_path: early-stopping, init_args: {monitor: val_loss}}]}
    model: {class_path: my_pkg.models:Classifier, init_args: {hidden: 128}}
    data: {class_path: my_pkg.data:Digits, init_args: {batch_size: 64}}
    ckpt_path: null

Several ``--config`` files merge in order, then flags override them. Every Trainer argument is a flag
(``--trainer.<name>``, generated from ``ember.core.options.declared_options()``); ``--model.<arg>`` and ``--data.<arg>``
set the classes' ``__init__`` arguments. Flag values are read as YAML (``3``, ``0.5``, ``true``, ``null``,
``[a, b]``), except where the argument is annotated ``str``. Keys and flags are checked against the Trainer's
fields and the classes' signatures; a wrong one gets an error naming it and the closest valid one.

Why not jsonargparse (LightningCLI's parser)? Ember's model and data contracts are duck-typed (any
``nn.Module``; a DataModule has no base class), which its subclass mode cannot express without a base class,
and ember wants ``module:Class`` paths, TOML and "did you mean" errors, each needing a layer around it. The
whole job is small with argparse, PyYAML, ``tomllib`` and the declared Trainer arguments.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from ember.cli_registry import command
from ember.core.errors import ConfigurationError, EmberError
from ember.core.options import Option, declared_options
from ember.hookspecs import hookimpl

STAGES = {
    "fit": "train a model (config file and/or flags); writes logs and checkpoints",
    "validate": "run one validation epoch and print the metrics",
    "test": "run one test epoch and print the metrics",
    "predict": "run predict_step over the data",
}
TOP_KEYS = ("seed_everything", "trainer", "model", "data", "ckpt_path")
_CLASS_KEYS = ("class_path", "init_args")
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_][\w.]*$")

#: One line of help per Trainer argument (arguments added later show their type and default only).
class CLIError(ConfigurationError):
    """A config file or flag that cannot be used as given."""


# ---------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------


def load_file(path: str) -> dict[str, Any]:
    """Read a YAML or TOML (``.toml``) config file into a dict."""
    if not os.path.isfile(path):
        raise CLIError(f"--config {path}: no such file.")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        if path.endswith(".toml"):
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            import yaml

            data = yaml.safe_load(raw) or {}
    except Exception as exc:
        raise CLIError(f"--config {path} could not be read: {exc}") from exc
    if not isinstance(data, dict):
        raise CLIError(f"--config {path}: expected a mapping of {', '.join(TOP_KEYS)}, got {type(data).__name__}.")
    return data


def yaml_value(text: str) -> Any:
    """A flag's value read as YAML: ``3`` -> 3, ``null`` -> None, ``[a, b]`` -> a list; else the text."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _takes_str(annotation: Any) -> bool:
    return annotation is str or annotation == "str"


def _close(key: str, choices: Any) -> str:
    close = difflib.get_close_matches(str(key), list(choices), n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""


# ---------------------------------------------------------------------------------------------------------
# Classes
# ---------------------------------------------------------------------------------------------------------


def import_class(path: str, where: str) -> type:
    """``package.module:Class`` (or ``package.module.Class``) -> the class."""
    if not isinstance(path, str) or not _CLASS_PATH.match(path):
        raise CLIError(f"{where}: {path!r} is not a class path; write 'package.module:Class'.")
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CLIError(f"{where}: cannot import module {module_name!r} for {path!r}: {exc}. Is the package "
                       "installed, or its folder on PYTHONPATH?") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise CLIError(f"{where}: {module_name!r} has no {part!r}.{_close(part, names)}")
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise CLIError(f"{where}: {path!r} is {type(obj).__name__}, not a class.")
    return obj


def class_path_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def init_parameters(cls: type) -> tuple[dict[str, inspect.Parameter], bool]:
    """The ``__init__`` parameters of ``cls`` (annotations resolved where possible), and whether it takes
    ``**kwargs``."""
    try:
        sig = inspect.signature(cls.__init__, eval_str=True)  # type: ignore[misc]
    except Exception:
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
    params = {n: p for n, p in list(sig.parameters.items())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return params, any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def check_init_args(cls: type, args: Mapping[str, Any], where: str) -> None:
    params, any_kw = init_parameters(cls)
    if any_kw:
        return
    for key in args:
        if key not in params:
            raise CLIError(f"{where}: unknown argument {key!r} for {class_path_of(cls)}.{_close(key, params)} "
                           f"Its arguments: {', '.join(params) or '(none)'}.")


def class_spec(value: Any, where: str) -> dict[str, Any]:
    """A ``model``/``data`` entry as ``{"class_path": ..., "init_args": {...}}``: a string is a class path; a
    mapping without ``class_path`` holds init arguments for the class given elsewhere."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"class_path": value, "init_args": {}}
    if not isinstance(value, Mapping):
        raise CLIError(f"{where}: expected a class path or {{class_path: ..., init_args: {{...}}}}, got {value!r}.")
    if not any(k in value for k in _CLASS_KEYS):
        for key in value:  # a misspelt class_path/init_args, rather than an argument of the class
            close = difflib.get_close_matches(str(key), _CLASS_KEYS, n=1, cutoff=0.75)
            if close:
                raise CLIError(f"{where}: unknown key {key!r}. Did you mean {close[0]!r}? Valid keys: class_path, "
                               "init_args (or the class's arguments directly, when its class_path is given "
                               "elsewhere).")
        return {"init_args": dict(value)}
    for key in value:
        if key not in _CLASS_KEYS:
            raise CLIError(f"{where}: unknown key {key!r}.{_close(key, _CLASS_KEYS)} Valid keys: class_path, init_args.")
    init_args = value.get("init_args") or {}
    if not isinstance(init_args, Mapping):
        raise CLIError(f"{where}.init_args: expected a mapping of argument names to values, got {init_args!r}.")
    spec: dict[str, Any] = {"init_args": dict(init_args)}
    if value.get("class_path") is not None:
        spec["class_path"] = value["class_path"]
    return spec


def merge_spec(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A later class spec over an earlier one: a different class starts afresh, the same one adds arguments."""
    if "class_path" in new and new["class_path"] != old.get("class_path"):
        return copy.deepcopy(new)
    merged = copy.deepcopy(old)
    merged.setdefault("init_args", {}).update(new.get("init_args", {}))
    if "class_path" in new:
        merged["class_path"] = new["class_path"]
    return merged


# ---------------------------------------------------------------------------------------------------------
# The whole configuration
# ---------------------------------------------------------------------------------------------------------

#: Every Trainer argument, core's and those plugins declare (name, type, default, help).
TRAINER_FIELDS = {option.name: option for option in declared_options()}


def _default(field: Option) -> Any:
    return field.default


def check_config(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check one config file's keys; return it with ``model``/``data`` as class specs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in TOP_KEYS:
            hint = _close(key, TOP_KEYS)
            if not hint and key in TRAINER_FIELDS:
                hint = f" Trainer arguments go under 'trainer:' (trainer.{key})."
            raise CLIError(f"{where}: unknown key {key!r}.{hint} Valid top-level keys: {', '.join(TOP_KEYS)}.")
        if key == "trainer":
            value = value or {}
            if not isinstance(value, Mapping):
                raise CLIError(f"{where}: 'trainer' must be a mapping of Trainer arguments, got {value!r}.")
            for name in value:
                if name not in TRAINER_FIELDS:
                    close = difflib.get_close_matches(str(name), list(TRAINER_FIELDS), n=1, cutoff=0.5)
                    hint = f" Did you mean 'trainer.{close[0]}'?" if close else ""
                    raise CLIError(f"{where}: unknown key 'trainer.{name}'.{hint} Valid Trainer arguments: "
                                   f"{', '.join(TRAINER_FIELDS)}.")
            out[key] = dict(value)
        elif key in ("model", "data"):
            out[key] = class_spec(value, f"{where}: {key}")
        else:
            out[key] = value
    return out


def build_parser(stage: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"ember {stage}", description=STAGES[stage] + ".",
        epilog="--model.<arg> / --data.<arg> set the classes' __init__ arguments. Flag values are read as YAML. "
               "See docs/cli.md.", allow_abbrev=False)
    p.add_argument("-c", "--config", action="append", default=[], metavar="FILE",
                   help="a YAML or TOML config file; repeat to merge several (later ones win)")
    p.add_argument("--print-config", "--print_config", dest="print_config", action="store_true",
                   help="print the resulting configuration as YAML (usable as --config) and exit")
    p.add_argument("--seed_everything", "--seed-everything", dest="seed_everything", type=yaml_value,
                   default=argparse.SUPPRESS, metavar="SEED", help="seed every random generator (an int)")
    p.add_argument("--model", default=argparse.SUPPRESS, metavar="CLASS",
                   help="the model class, package.module:Class (a torch.nn.Module with training_step)")
    p.add_argument("--data", default=argparse.SUPPRESS, metavar="CLASS",
                   help="the DataModule class, package.module:Class (optional: the model's own *_dataloader())")
    p.add_argument("--ckpt_path", "--ckpt-path", dest="ckpt_path", default=argparse.SUPPRESS, metavar="PATH",
                   help="a checkpoint to resume from (fit) or to load the weights of")
    group = p.add_argument_group("Trainer arguments (see docs/trainer.md)")
    for name, field in TRAINER_FIELDS.items():
        flags = [f"--trainer.{name}"] + ([f"--trainer.{name.replace('_', '-')}"] if "_" in name else [])
        default = _default(field)
        typ = str if _takes_str(field.type) else yaml_value
        group.add_argument(*flags, dest=f"trainer.{name}", type=typ, default=argparse.SUPPRESS,
                           metavar="VALUE", help=f"{field.help or name} (default: {default!r})")
    return p


def parse(stage: str, argv: list[str]) -> dict[str, Any]:
    """The merged configuration: files in order, then flags."""
    parser = build_parser(stage)
    args, rest = parser.parse_known_args(argv)
    extra: dict[str, dict[str, str]] = {"model": {}, "data": {}}
    i = 0
    while i < len(rest):
        word = rest[i]
        name, eq, value = word.partition("=")
        prefix = name[2:].split(".", 1)[0] if name.startswith("--") else ""
        if prefix in extra and "." in name:
            if not eq:
                if i + 1 >= len(rest):
                    raise CLIError(f"{name} needs a value.")
                i += 1
                value = rest[i]
            arg = name[2:].split(".", 1)[1]
            arg = arg[len("init_args."):] if arg.startswith("init_args.") else arg
            extra[prefix][arg] = value
            i += 1
            continue
        if name.startswith("-"):
            options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            raise CLIError(f"unknown option {name!r}.{_close(name, options)} `ember {stage} --help` lists them.")
        raise CLIError(f"unexpected argument {word!r}; options start with -- (e.g. --config run.yaml).")

    config: dict[str, Any] = {"seed_everything": None, "trainer": {}, "model": {}, "data": {}, "ckpt_path": None}
    for path in args.config:
        loaded = check_config(load_file(path), path)
        for key, value in loaded.items():
            if key == "trainer":
                config["trainer"].update(value)
            elif key in ("model", "data"):
                config[key] = merge_spec(config[key], value)
            else:
                config[key] = value
    given = vars(args)
    for key in ("seed_everything", "ckpt_path"):
        if key in given:
            config[key] = given[key]
    for key in ("model", "data"):
        if key in given:
            config[key] = merge_spec(config[key], {"class_path": given[key], "init_args": {}})
    for key, value in given.items():
        if key.startswith("trainer."):
            config["trainer"][key.split(".", 1)[1]] = value
    for key in ("model", "data"):
        spec = config[key]
        if not spec:
            if extra[key]:
                raise CLIError(f"--{key}.{next(iter(extra[key]))} was given, but no {key} class: pass --{key} "
                               "package.module:Class or set it in the config file.")
            continue
        if "class_path" not in spec:
            raise CLIError(f"{key}: init_args were given but no class_path.")
        cls = import_class(spec["class_path"], key)
        params, _ = init_parameters(cls)
        for arg, raw in extra[key].items():
            param = params.get(arg)
            spec["init_args"][arg] = raw if param is not None and _takes_str(param.annotation) else yaml_value(raw)
        check_init_args(cls, spec["init_args"], f"{key}.init_args")
    if not config["model"]:
        raise CLIError(f"ember {stage} needs a model: --model package.module:Class, or 'model:' in a config file.")
    config["print_config"] = args.print_config
    return config


def full_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration with every default filled in, for ``--print-config``."""
    out: dict[str, Any] = {"seed_everything": config["seed_everything"]}
    trainer = {}
    for name, field in TRAINER_FIELDS.items():
        default = _default(field)
        trainer[name] = config["trainer"].get(name, list(default) if isinstance(default, tuple) else default)
    out["trainer"] = trainer
    for key in ("model", "data"):
        spec = config[key]
        if not spec:
            out[key] = None
            continue
        cls = import_class(spec["class_path"], key)
        params, _ = init_parameters(cls)
        init_args = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        init_args.update(spec["init_args"])
        out[key] = {"class_path": class_path_of(cls), "init_args": init_args}
    out["ckpt_path"] = config["ckpt_path"]
    return out


# ---------------------------------------------------------------------------------------------------------
# Building the objects
# ---------------------------------------------------------------------------------------------------------


def instantiate(spec: Mapping[str, Any], where: str) -> Any:
    cls = import_class(spec["class_path"], where)
    args = dict(spec.get("init_args") or {})
    check_init_args(cls, args, f"{where}.init_args")
    return cls(**args)


def plugin_object(item: Any, role: str, where: str) -> Any:
    """A ``trainer.callbacks``/``plugins``/``logger`` entry: a name or identity stays a string (the Trainer
    looks it up); ``package.module:Class`` or ``{class_path, init_args}`` is built here. A ``class_path`` may
    also be a plugin's name or identity, to pass it arguments: ``{class_path: early-stopping, init_args: ...}``."""
    if isinstance(item, str):
        return import_class(item, where)() if ":" in item else item
    if not isinstance(item, Mapping):
        return item
    spec = class_spec(item, where)
    path = spec.get("class_path")
    if not isinstance(path, str):
        raise CLIError(f"{where}: expected a name, a class path, or {{class_path: ..., init_args: {{...}}}}.")
    if ":" not in path:
        from ember.core import discovery

        found = discovery.discover()
        identity = path if "." in path and path.split(".", 1)[0] in {i.split(".")[0] for i in found.plugins} \
            else f"{role}.{path}"
        if identity in found.plugins:
            info = discovery.only(identity, found.plugins[identity])
            path = info.value.replace(" ", "")
    return instantiate({"class_path": path, "init_args": spec["init_args"]}, where)


def trainer_kwargs(trainer: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = dict(trainer)
    for key, role in (("callbacks", "callback"), ("plugins", "plugin"), ("logger", "logger")):
        if key not in kwargs:
            continue
        value = kwargs[key]
        if isinstance(value, list):
            kwargs[key] = [plugin_object(v, role, f"trainer.{key}[{i}]") for i, v in enumerate(value)]
        elif isinstance(value, (str, Mapping)):
            kwargs[key] = plugin_object(value, role, f"trainer.{key}")
    return kwargs


class SaveConfig:
    """Writes the run's configuration to ``<log_dir>/config.yaml`` when ``fit`` starts (global rank 0), so a
    run can be repeated with ``ember fit --config <log_dir>/config.yaml``."""

    identity = "cli.save-config"

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.path: str | None = None

    @hookimpl(trylast=True)
    def setup(self, trainer: Any, stage: str) -> None:  # trylast: after the loggers fixed their folder
        if stage != "fit" or not trainer.is_global_zero:
            return
        import yaml

        os.makedirs(trainer.log_dir, exist_ok=True)
        self.path = os.path.join(trainer.log_dir, "config.yaml")
        with open(self.path, "w", encoding="utf-8") as f:
            yaml.safe_dump(self.config, f, sort_keys=False)


def run(stage: str, argv: list[str]) -> int:
    import yaml

    if "" not in sys.path and os.getcwd() not in sys.path:  # class paths resolve from here, as under python -m
        sys.path.insert(0, os.getcwd())
    try:
        config = parse(stage, argv)
        full = full_config(config)
        if config["print_config"]:
            sys.stdout.write(yaml.safe_dump(full, sort_keys=False))
            return 0
        import ember

        if config["seed_everything"] is not None:
            ember.seed_everything(int(config["seed_everything"]))
        model = instantiate(config["model"], "model")
        data = instantiate(config["data"], "data") if config["data"] else None
        kwargs = trainer_kwargs(config["trainer"])
        if stage == "fit":
            plugins = kwargs.get("plugins") or []
            kwargs["plugins"] = [*(plugins if isinstance(plugins, list) else [plugins]), SaveConfig(full)]
        trainer = ember.Trainer(**kwargs)
    except EmberError as exc:
        print(f"ember {stage}: error: {exc}", file=sys.stderr)
        return 2
    ckpt_path = config["ckpt_path"]
    if stage == "fit":
        trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
        if trainer.interrupted:
            return 130
    elif stage in ("validate", "test"):
        getattr(trainer, stage)(model, datamodule=data, ckpt_path=ckpt_path)
    else:
        predictions = trainer.predict(model, datamodule=data, ckpt_path=ckpt_path)
        count = len(predictions) if isinstance(predictions, list) else 0
        print(f"predict: {count} batches of predictions (add the 'prediction-writer' callback to save them).")
    return 0


def _register(stage: str) -> None:
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("argv", nargs=argparse.REMAINDER, help=f"see `ember {stage} --help`")

    @command(stage, STAGES[stage], add_arguments, raw=True)
    def _run(args: argparse.Namespace) -> int:
        return run(stage, list(args.argv))


for _stage in STAGES:
    _register(_stage)
