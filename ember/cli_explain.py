"""jsonargparse's errors for ``ember fit|validate|test|predict`` as one line: the key or flag, where it was (which
config file), and the closest valid one."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from ember.core.errors import EmberError, suggest
from ember.core.hooks.options import declared_options

TOP_KEYS = ("seed_everything", "trainer", "model", "data", "ckpt_path")


def flags() -> list[str]:
    """Every option of ``ember fit`` (for suggestions)."""
    return ["--config", "--print_config", "--seed_everything", "--model", "--data", "--ckpt_path",
            *(f"--trainer.{option.name}" for option in declared_options())]




def explain(message: str, argv: list[str]) -> str:
    """jsonargparse's error ``message`` (several indented lines) as one line naming the key, with the closest
    valid one."""
    found = re.match(r"unrecognized arguments: (\S+)", message)
    if found:
        word = found.group(1)
        if not word.startswith("-"):
            return f"unexpected argument {word!r}; options start with -- (e.g. --config run.yaml)."
        name = word.split("=")[0]
        return f"unknown option {name!r}.{suggest(name, flags())} `--help` lists them."
    found = re.match(r"Option '([^']+)' is not accepted", message)  # a key of a config file
    if found:
        return _unknown_key(found.group(1), argv)
    key = re.search(r'Parser key "([^"]+)"', message)
    where = key.group(1) if key else "config"
    found = re.search(r"File does not exist: '([^']+)'", message)
    if found:
        return f"--config {found.group(1)}: no such file."
    if message.startswith(("Problems parsing config", "Unexpected config")):
        detail = " ".join(message.split(":", 1)[1].split()).replace('"<unicode string>", ', "")
        return f"{_unreadable(argv) or 'a config'} is not a YAML mapping of {', '.join(TOP_KEYS)}: {detail}."
    found = re.search(r"Given value: (\{.*\})$", message, flags=re.M)
    if found and "class_path" not in found.group(1):
        keys = re.findall(r"'([^']+)': ", found.group(1))[:1] or ["?"]
        return (f"{where}: unknown key {keys[0]!r}.{suggest(keys[0], ['class_path', 'init_args'])} "
                "Valid keys: class_path, init_args.")
    path = re.search(r"Problem with given class_path '([^']+)':", message)
    if path:
        return f"{where}: {_class_problem(path.group(1), message)}"
    found = re.search(r"does not correspond to a subclass of (\w+)", message)
    if found:
        given = re.search(r"Given value: (.*)", message)
        what = "torch.nn.Module" if found.group(1) == "Model" else "DataModule (a class with *_dataloader() methods)"
        return f"{where}: {given.group(1) if given else 'the class'} is not a {what}."
    expected = re.findall(r"Expected a <class '(\w+)'>", message)
    given = re.search(r"(?:Given|Got) value: (.*)", message)
    if expected and given:
        names = sorted((name.replace("NoneType", "null") for name in dict.fromkeys(expected)),
                       key=lambda name: name == "null")  # null last, whichever order the release lists them in
        return f"--{where}: expected {' or '.join(names)}, got {given.group(1)!r}."
    lines = [line.strip(" -") for line in message.splitlines() if line.strip(" -")]
    return " ".join(lines)


def _unknown_key(key: str, argv: list[str]) -> str:
    valid = [*TOP_KEYS, *(f"trainer.{option.name}" for option in declared_options())]
    source = _config_holding(key, argv)
    hint = suggest(key, valid)
    last = key.rsplit(".", 1)[-1]
    if not hint and f"trainer.{last}" in valid:
        hint = f" Trainer arguments go under 'trainer:' (trainer.{last})."
    where = f" in {source}" if source else ""
    return f"unknown key {key!r}{where}.{hint or ' Valid top-level keys: ' + ', '.join(TOP_KEYS) + '.'}"


def _config_holding(key: str, argv: list[str]) -> str | None:
    """The config file among ``argv`` that holds ``key`` (``trainer.max_epoch``), if one does."""
    import yaml

    from ember.cli_registry import load_toml

    files = [word for before, word in zip(["", *argv], argv) if before in ("-c", "--config") and os.path.isfile(word)]
    for path in reversed(files):
        try:
            with open(path, encoding="utf-8") as f:
                data: Any = load_toml(path) if path.endswith(".toml") else yaml.safe_load(f)
        except (EmberError, yaml.YAMLError, OSError):
            continue
        for part in key.split("."):
            data = data.get(part) if isinstance(data, Mapping) else None
        if data is not None or _has_key(path, key):
            return path
    return None


def _unreadable(argv: list[str]) -> str | None:
    """The config file among ``argv`` that is no YAML mapping."""
    import yaml

    for before, word in zip(["", *argv], argv):
        if before in ("-c", "--config") and os.path.isfile(word) and not word.endswith(".toml"):
            with open(word, encoding="utf-8") as f:
                try:
                    if isinstance(yaml.safe_load(f), dict):
                        continue
                except yaml.YAMLError:
                    pass
            return word
    return None


def _has_key(path: str, key: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return re.search(rf"^\s*{re.escape(key.rsplit('.', 1)[-1])}\s*[:=]", f.read(), flags=re.M) is not None


def _class_problem(path: str, message: str) -> str:
    """What is wrong with ``class_path: path`` and its ``init_args``, from jsonargparse's message."""
    tail = message.split(f"class_path '{path}':", 1)[1]
    found = re.search(r"Option '([^']+)' is not accepted", tail)
    if found:
        name = found.group(1)
        params = _parameters(path)
        if "." in name:  # init_arg.hidden: a misspelt init_args
            first = name.split(".")[0]
            return f"unknown key {first!r}.{suggest(first, ['class_path', 'init_args'])} Valid keys: class_path, init_args."
        return (f"unknown argument {name!r} for {path}.{suggest(name, params)} "
                f"Its arguments: {', '.join(params) or '(none)'}.")
    found = re.search(r"module '([^']+)' has no attribute '([^']+)'", tail)
    if found:
        return missing(*found.groups())
    found = re.search(r"the following arguments are required: ([\w, ]+)", tail)
    if found:
        names = [n.strip() for n in found.group(1).split(",")]
        return f"{path} needs {', '.join(f'init_args.{n}' for n in names)} (it has no default)."
    found = re.search(r"No module named '([^']+)'", tail)
    if found:
        return (f"cannot import module {found.group(1)!r} for {path!r}: is the package installed, or its folder on "
                "PYTHONPATH (the current directory is searched first)?")
    found = re.search(r'Parser key "([^"]+)":\s*Expected a <class \'(\w+)\'>\. Got value: (.*)', tail)
    if found:
        arg, typ, value = found.groups()
        return f"init_args.{arg} of {path}: expected {typ}, got {value!r}."
    return " ".join(line.strip(" -") for line in tail.splitlines() if line.strip(" -"))


def missing(module: str, attr: str) -> str:
    """``module`` has no ``attr``: with the closest of its names and submodules."""
    import pkgutil

    found = sys.modules.get(module)
    names = [n for n in dir(found) if not n.startswith("_")]
    names += [info.name for info in pkgutil.iter_modules(getattr(found, "__path__", []))]
    return f"{module!r} has no {attr!r}.{suggest(attr, names)}"


def _parameters(path: str) -> list[str]:
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        return [n for n, p in inspect.signature(cls).parameters.items() if p.kind not in (p.VAR_POSITIONAL,
                                                                                         p.VAR_KEYWORD)]
    except Exception:  # the message stays useful without the list
        return []
