"""Lightning's names for ember's classes, imported on first use: the module ``__getattr__`` of
:mod:`ember.lightning.callbacks` and :mod:`ember.lightning.loggers`."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, aliases: dict[str, tuple[str, str]], missing: dict[str, str],
               kind: str = "") -> Callable[[str], Any]:
    """A module ``__getattr__``: ``aliases[name]`` is ``(ember module, ember class)``, imported when first asked
    for; ``missing[name]`` says what to use instead of a Lightning name ember has no class for (``kind``, e.g.
    ``" callback"``, follows the name in that error)."""

    def __getattr__(name: str) -> Any:
        found = aliases.get(name)
        if found is not None:
            return getattr(importlib.import_module(found[0]), found[1])
        if name in missing:
            raise AttributeError(f"ember has no {name}{kind}: {missing[name]}.")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
