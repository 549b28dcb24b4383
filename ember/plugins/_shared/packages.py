"""Whether an optional package a plugin needs is installed, found without importing it.

``check_available`` runs for every plugin ``ember plugins`` lists and for each plugin a Trainer is given; importing
MLflow, W&B or TensorBoard there to see whether they exist would cost seconds each. The plugin imports its package
when it first uses it, and an installation that is present but broken fails there, with the package's own error.
"""

from __future__ import annotations

import importlib.util

from ember.core.errors import ConfigurationError


def require(package: str, what: str, extra: str, alternative: str = "") -> None:
    """Raise :class:`ConfigurationError` saying that ``what`` needs ``package`` (``pip install 'ember[extra]'``)
    when ``package`` is not installed. ``alternative`` ends the message with a choice that needs nothing."""
    if importlib.util.find_spec(package) is None:
        instead = f" (or choose {alternative})" if alternative else ""
        raise ConfigurationError(f"{what} needs the {package} package: pip install 'ember[{extra}]'{instead}.")
