"""What an ``add_options`` implementation receives: the protocol of the registry it declares arguments in.

``ember.core.hooks.options.OptionRegistry`` is the implementation; a plugin annotates with this protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class OptionRegistry(Protocol):
    """Declares the Trainer arguments a plugin owns (``add``) and the roles it is the default of."""

    def add(self, name: str, *, type: str, default: Any, help: str, validate: Callable[[Any], Any] | None = None,
            switches: str | None = None) -> None:
        """Declare the Trainer argument ``name``: its type (as shown in help and errors), default, help line,
        an optional check that raises ``ember.ConfigurationError``, and whether a value switches the plugin on."""

    def switched_on_by(self, name: str, *, replaced_by: str) -> None:
        """Let an argument declared elsewhere switch the declaring plugin on (unless a plugin whose identity
        starts with ``replaced_by`` is passed)."""

    def default_of(self, role: str) -> None:
        """Make the declaring plugin the one ``Trainer(<role>=True)`` selects."""
