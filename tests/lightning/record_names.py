"""Records the public names of the ``lightning.pytorch`` modules that user code imports, for
tests/test_lightning_names.py.

A module's public names are its ``__all__`` where it has one, else the names not starting with ``_`` that the
module defines or re-exports, less other modules (``import os``) and the typing helpers every module imports.
Run in an environment with Lightning 2.6 installed (not a dependency of ember):
    python tests/lightning/record_names.py > tests/lightning/names.json
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
import typing

#: The modules of lightning.pytorch whose names user code imports.
MODULES = (
    "lightning.pytorch",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
    "lightning.pytorch.profilers",
    "lightning.pytorch.tuner",
    "lightning.pytorch.core",
    "lightning.pytorch.demos.boring_classes",
    "lightning.pytorch.utilities",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.pytorch.utilities.types",
    "lightning.pytorch.utilities.exceptions",
    "lightning.pytorch.utilities.model_summary",
    "lightning.pytorch.utilities.combined_loader",
    "lightning.pytorch.utilities.seed",
    "lightning.pytorch.utilities.model_helpers",
    "lightning.pytorch.trainer.states",
    "lightning.pytorch.strategies",
    "lightning.pytorch.accelerators",
    "lightning.pytorch.plugins",
    "lightning.pytorch.plugins.precision",
    "lightning.pytorch.plugins.io",
    "lightning.pytorch.plugins.environments",
    "lightning.pytorch.cli",
)
#: Names every module gets from ``typing`` and ``__future__``: not the module's own.
_NOISE = set(dir(typing)) | {"annotations", "Tensor", "nn", "torch", "np", "numpy", "log", "Path", "partial",
                             "contextmanager", "wraps", "dataclass", "field", "ABC", "abstractmethod", "override",
                             "deepcopy", "OrderedDict", "defaultdict", "Enum", "Mapping", "Sequence", "Iterable",
                             "Iterator", "Generator", "Callable", "MutableMapping", "timedelta", "datetime", "time"}


def public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(set(names))
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in _NOISE or inspect.ismodule(value):
            continue
        origin = getattr(value, "__module__", None) or ""
        if inspect.isclass(value) or inspect.isfunction(value):
            if not origin.startswith(("lightning", "torch")):
                continue  # a standard-library or third-party helper the module imported
        found.append(name)
    return sorted(found)


def main() -> None:
    import lightning

    record: dict[str, object] = {"lightning_version": lightning.__version__}
    for name in MODULES:
        module = importlib.import_module(name)
        record[name] = public_names(module)
    json.dump(record, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
