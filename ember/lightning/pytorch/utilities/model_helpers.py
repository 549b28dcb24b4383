"""``lightning.pytorch.utilities.model_helpers``: ``is_overridden`` and the helpers Lightning code imports with it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from ember.core.hooks.positional import is_base_hook


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance`` defines ``method_name`` itself rather than taking ``parent``'s (by default the ember
    base class it derives from: Module, DataModule or Callback)."""
    if instance is None:
        return False
    if parent is None:
        from ember.core.api.callback import Callback
        from ember.core.api.datamodule import DataModule
        from ember.core.api.module import Module

        parent = next((base for base in (Module, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(f"is_overridden({method_name!r}): {type(instance).__name__} derives from no "
                             "LightningModule, LightningDataModule or Callback; pass parent=.")
    own = getattr(type(instance), method_name, None)
    if own is None or getattr(instance, method_name, None) is None:  # a hook switched off on the instance
        return False
    base = getattr(parent, method_name, None)
    if base is None:
        return True
    own_code = getattr(own, "__code__", None) or getattr(getattr(own, "fget", None), "__code__", None)
    base_code = getattr(base, "__code__", None) or getattr(getattr(base, "fget", None), "__code__", None)
    if is_base_hook(own):
        return False
    return own_code is not base_code if own_code is not None else own is not base


class RequirementCache:
    """``bool(RequirementCache("torchvision>=0.15"))``: whether an installed distribution meets the requirement
    (or, with ``module=``, whether the module can be imported). ``str()`` says what is missing."""

    def __init__(self, requirement: str, module: str | None = None) -> None:
        self.requirement = requirement
        self.module = module
        self._message: str | None = None

    def _check(self) -> bool:
        from packaging.requirements import Requirement

        if self.module is not None:
            found = importlib.util.find_spec(self.module) is not None
            self._message = "" if found else f"Module not found: {self.module!r}. HINT: Try running `pip install -U {self.requirement}`"
            return found
        req = Requirement(self.requirement)
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            self._message = f"Requirement {self.requirement!r} not met: {req.name} is not installed. HINT: Try running `pip install -U {self.requirement!r}`"
            return False
        ok = req.specifier.contains(version, prereleases=True)
        self._message = "" if ok else f"Requirement {self.requirement!r} not met, found {req.name}=={version}. HINT: Try running `pip install -U {self.requirement!r}`"
        return ok

    def __bool__(self) -> bool:
        return self._check()

    def __str__(self) -> str:
        self._check()
        return self._message or f"Requirement {self.requirement!r} met"

    def __repr__(self) -> str:
        return self.__str__()


def get_torchvision_model(model_name: str, **kwargs: Any) -> Any:
    """``torchvision.models.get_model(model_name, **kwargs)`` (torchvision must be installed)."""
    if importlib.util.find_spec("torchvision") is None:
        raise ModuleNotFoundError("get_torchvision_model needs torchvision: pip install torchvision.")
    from torchvision import models

    return models.get_model(model_name, **kwargs)


__all__ = ["RequirementCache", "get_torchvision_model", "is_overridden"]
