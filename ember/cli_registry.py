"""Where the ``ember`` command's sub-commands register (:func:`command`). It imports nothing of ember, so any
module can add a sub-command without importing :mod:`ember.cli` (which imports them: one direction)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

#: name -> (help, add_arguments(parser), run(args) -> exit code)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


#: Commands that parse their own arguments: ``run(args)`` gets ``args.argv``, the words after the command.
RAW_COMMANDS: set[str] = set()


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None,
            raw: bool = False):
    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, add_arguments, run)
        if raw:
            RAW_COMMANDS.add(name)
        return run

    return register
