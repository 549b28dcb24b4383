"""``lightning.pytorch.utilities``: the helpers Lightning code imports, on ember's objects.

``AttributeDict`` is the class of ``module.hparams``; ``move_data_to_device`` is the function ember's loop moves
batches with; ``grad_norm`` gives the same keys as ember's ``callback.grad-norm``.
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
import warnings
from enum import Enum
from pathlib import Path
from typing import Any

import numpy
import torch

from ember.core.api.module import AttributeDict
from ember.core.errors import PossibleUserWarning
from ember.core.hooks.defaults import move_to_device
from ember.lightning.pytorch.utilities.combined_loader import CombinedLoader
from ember.lightning.pytorch.utilities.rank_zero import (
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

FLOAT16_EPSILON = numpy.finfo(numpy.float16).eps
FLOAT32_EPSILON = numpy.finfo(numpy.float32).eps
FLOAT64_EPSILON = numpy.finfo(numpy.float64).eps


class LightningEnum(str, Enum):
    """A string enum whose members compare equal to their values, case-insensitively (``"Norm" == NORM``)."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        for member in cls:
            if (source in ("key", "any") and member.name.lower() == value.lower()) or \
                    (source in ("value", "any") and member.value.lower() == value.lower()):
                return member
        raise ValueError(f"{value!r} is not a {cls.__name__}: expected one of {[m.value for m in cls]}.")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())


class GradClipAlgorithmType(LightningEnum):
    """``Trainer(gradient_clip_algorithm=...)``'s values."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        return any(x.value == val for x in GradClipAlgorithmType)

    @staticmethod
    def supported_types() -> list[str]:
        return [x.value for x in GradClipAlgorithmType]


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """Every tensor in ``batch`` (nested lists, tuples, dicts, namedtuples, dataclasses, objects with ``.to``)
    moved to ``device``: the function ember's loop moves batches with."""
    return move_to_device(batch, torch.device(device) if not isinstance(device, torch.device) else device)


def grad_norm(module: torch.nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """The p-norm of each parameter's gradient, ``grad_<p>_norm/<name>``, and of all of them together,
    ``grad_<p>_norm_total`` (parameters without a gradient are left out; empty when none has one). Call it in
    ``on_before_optimizer_step`` and ``self.log_dict`` the result."""
    norm = float(norm_type)
    if norm <= 0:
        raise ValueError(f"grad_norm(norm_type={norm_type!r}): expected a positive number or 'inf'.")
    norms = {f"grad_{norm}_norm{group_separator}{name}": torch.linalg.vector_norm(p.grad.detach(), norm)
             for name, p in module.named_parameters() if p.grad is not None}
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.linalg.vector_norm(torch.stack(list(norms.values())), norm)
    return norms


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore :class:`PossibleUserWarning` (from ``module`` only, when given)."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


def is_shared_filesystem(strategy: Any, path: str | os.PathLike | None = None, timeout: int = 3) -> bool:
    """Whether ``path`` (default: the working directory) is one folder seen by every process. ``strategy`` is
    anything with ``world_size``, ``broadcast`` and ``reduce_boolean_decision``: ember's Trainer (or Lightning's
    strategy object). One process: True. Otherwise process 0 writes a file there and every process looks for it
    (a collective: call it on every process)."""
    world_size = getattr(strategy, "world_size", 1)
    if world_size == 1:
        return True
    folder = Path(os.getcwd() if path is None else path).resolve()
    same = folder == strategy.broadcast(folder)
    if not strategy.reduce_boolean_decision(same, all=True):
        return False
    token = strategy.broadcast(uuid.uuid4().hex)
    probe = folder / f".ember-shared-fs-{token}"
    if getattr(strategy, "is_global_zero", getattr(strategy, "global_rank", 0) == 0):
        probe.touch()
    deadline = time.monotonic() + timeout
    found = probe.exists()
    while not found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = probe.exists()
    shared = strategy.reduce_boolean_decision(found, all=True)
    if getattr(strategy, "is_global_zero", getattr(strategy, "global_rank", 0) == 0):
        probe.unlink(missing_ok=True)
    return bool(shared)


def is_picklable(obj: object) -> bool:
    """Whether ``pickle.dumps(obj)`` succeeds."""
    try:
        pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def find_shared_parameters(module: torch.nn.Module) -> list[list[str]]:
    """Groups of parameter names that share one tensor (tied weights), each group of two or more names."""
    groups: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def set_shared_parameters(module: torch.nn.Module, shared_params: list[list[str]]) -> torch.nn.Module:
    """Tie again the parameters named in each group (after moving or rebuilding a module): every name in a group
    gets the first name's parameter."""
    for group in shared_params:
        first = module.get_parameter(group[0])
        for name in group[1:]:
            owner, _, attr = name.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, attr, first)
    return module


def measure_flops(model: torch.nn.Module, forward_fn: Any, loss_fn: Any = None) -> int:
    """The floating-point operations of ``forward_fn()`` (and of the backward of ``loss_fn(output)`` when given),
    counted by ``torch.utils.flop_counter`` (build the model on the ``meta`` device to count without memory)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return counter.get_total_flops()


def suggested_max_num_workers(local_world_size: int) -> int:
    """A ``DataLoader(num_workers=...)`` for each of ``local_world_size`` processes on this machine: the CPU cores
    this process may use, shared out, less one for the main process, at least 1."""
    from ember.lightning.fabric.utilities import data  # its CPU count is the one a test can patch

    return data.suggested_max_num_workers(local_world_size)


__all__ = ["AttributeDict", "CombinedLoader",
           "GradClipAlgorithmType", "LightningEnum", "disable_possible_user_warnings", "find_shared_parameters", "grad_norm", "is_picklable", "is_shared_filesystem",
           "measure_flops", "move_data_to_device", "rank_zero_deprecation", "rank_zero_info", "rank_zero_only",
           "rank_zero_warn", "set_shared_parameters", "suggested_max_num_workers"]
