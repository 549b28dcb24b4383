"""Where the ``ember`` command's sub-commands register (:func:`command`), and what they share: :class:`CLIError`
(a one-line usage error, exit status 2), :class:`ArgumentParser` (argparse that raises it, with a suggestion
for a mistyped option or choice) and :func:`load_toml`. It imports nothing of ember's CLI, so any module can add
a sub-command without importing :mod:`ember.cli` (which imports them: one direction)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, NoReturn

import attrs

from ember.core.errors import ConfigurationError, suggest


class CLIError(ConfigurationError):
    """A command line or config file that cannot be used as given: ``ember`` prints it on one line and exits
    with status 2 (with the traceback under ``--debug``)."""


@attrs.frozen
class Command:
    """One sub-command: its help line, how it adds its arguments to an :class:`ArgumentParser`, and its
    function. ``raw`` commands parse their own arguments: ``run`` gets the words after the command."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Any], int]
    raw: bool = False


#: name -> the sub-command, in the order they registered
COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None,
            raw: bool = False) -> Callable[[Callable[[Any], int]], Callable[[Any], int]]:
    """Register ``run`` as ``ember <name>``: it gets argparse's namespace (or, ``raw``, the list of words)."""

    def register(run: Callable[[Any], int]) -> Callable[[Any], int]:
        COMMANDS[name] = Command(help, add_arguments, run, raw)
        return run

    return register


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (\S+)")
_CHOICE = re.compile(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are :class:`CLIError`: one line, naming the option, with the closest valid one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--jso` is a typo to report, not `--json`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CLIError(explain_argparse(message, self.option_strings()))

    def option_strings(self) -> list[str]:
        return [o for action in self._actions for o in action.option_strings]


def explain_argparse(message: str, options: list[str]) -> str:
    """argparse's error ``message`` with a suggestion for an unknown option or a mistyped choice."""
    found = _UNRECOGNIZED.match(message)
    if found:
        word = found.group(1)
        if word.startswith("-"):
            return f"unknown option {word!r}.{suggest(word.split('=')[0], options)} `--help` lists them."
        return f"unexpected argument {word!r}. `--help` lists what this command takes."
    found = _CHOICE.match(message)
    if found:
        option, value, choices = found.groups()
        names = re.findall(r"'([^']*)'", choices)
        return f"{option}: invalid choice {value!r}.{suggest(value, names)} Choose from: {', '.join(names)}."
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def load_toml(path: str) -> dict[str, Any]:
    """A TOML config file's content; a clear error when it is not TOML."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise CLIError(f"{path} is not valid TOML: {exc}.") from exc
