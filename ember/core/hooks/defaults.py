"""``core.defaults``: the plain-PyTorch answer to every role hook, registered ``trylast`` for every run.

A role plugin implements only what it changes; whatever it leaves unanswered falls through to these. This
plugin is essential and cannot be blocked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from ember.core.errors import StepSignatureError
from ember.core.hooks.plugin_manager import noop_fallback
from ember.core.hooks.positional import defines
from ember.hookspecs import hookimpl

IDENTITY = "core.defaults"
STEP_METHODS = {"train": "training_step", "validate": "validation_step", "test": "test_step",
                "predict": "predict_step"}
def move_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor in nested tuples, lists, dicts and dataclasses to ``device``."""
    if type(batch) is list:  # the default collate's batch, every step: its tensors moved without a recursive call
        return [b.to(device, non_blocking=non_blocking) if type(b) is torch.Tensor
                else move_to_device(b, device, non_blocking) for b in batch]
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(b, device, non_blocking) for b in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*moved)
        return type(batch)(moved) if not isinstance(batch, list) else moved
    if isinstance(batch, dict):
        return type(batch)((k, move_to_device(v, device, non_blocking)) for k, v in batch.items())
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: move_to_device(getattr(batch, f.name), device, non_blocking)
                                            for f in dataclasses.fields(batch) if f.init})
    to = getattr(batch, "to", None)
    if callable(to) and not isinstance(batch, type):
        return to(device)
    return batch


#: How each module class's ``*_step`` is called: 0 ``(batch)``, 1 ``(batch, batch_idx)``, 2 ``(..., dataloader_idx=)``.
_step_arity: dict[tuple[type, str], int] = {}


def _arity(module: Any, name: str) -> int:
    try:
        params = _step_parameters(module, name)
    except (TypeError, ValueError):
        return 1
    if "dataloader_idx" in params:
        return 2
    kinds = [p.kind for p in params.values()]
    positional = [k for k in kinds if k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or inspect.Parameter.VAR_POSITIONAL in kinds:
        return 3  # room for a third position: the dataloader index, when the stage has several loaders
    # Lightning passes batch_idx only to a step that has room for it: ``training_step(self, batch)`` gets the batch
    return 1 if len(positional) >= 2 or "batch_idx" in params else 0


#: The (class, step, several loaders) whose signature :func:`check_dataloader_idx` found fitting.
_idx_fits: set[tuple[type, str, bool]] = set()


#: The module's batch hooks of each evaluation stage, whose last argument is the dataloader index.
_BATCH_HOOKS = {stage: (f"on_{hook}_batch_start", f"on_{hook}_batch_end")
                for stage, hook in (("validate", "validation"), ("test", "test"), ("predict", "predict"))}


def check_dataloader_idx(module: Any, stage: str, num_loaders: int) -> None:
    """Before an evaluation or predict run (not per batch): refuse a ``*_step`` or a batch hook of the module
    (``on_validation_batch_start``, ...) that requires ``dataloader_idx`` when the run has one loader (there is no
    index to pass, as in Lightning), or that cannot take it when it has several (its batches could not be told
    apart)."""
    step = STEP_METHODS[stage]
    for name in (step, *_BATCH_HOOKS[stage]):
        key = (type(module), name, num_loaders > 1)
        if key in _idx_fits or not (callable(getattr(module, name, None)) if name == step else defines(module, name)):
            continue
        try:
            params = _step_parameters(module, name)
        except (TypeError, ValueError):
            continue
        _check_index_parameter(params, f"`{type(module).__name__}.{name}()`", stage, num_loaders)
        if name not in getattr(module, "__dict__", ()):
            _idx_fits.add(key)


def _check_index_parameter(params: Mapping[str, inspect.Parameter], where: str, stage: str, num_loaders: int) -> None:
    idx = params.get("dataloader_idx")
    if num_loaders <= 1 and idx is not None and idx.default is inspect.Parameter.empty \
            and idx.kind is not inspect.Parameter.KEYWORD_ONLY:
        raise StepSignatureError(
            f"trainer.{stage}() runs one dataloader, but you have included `dataloader_idx` in {where} with no "
            "default: with one loader there is no index to pass. Give it a default (`dataloader_idx=0`) or "
            "remove it.")
    if num_loaders > 1 and idx is None and not any(p.kind is inspect.Parameter.VAR_POSITIONAL
                                                   for p in params.values()):
        raise StepSignatureError(
            f"trainer.{stage}() runs {num_loaders} dataloaders, but there is no `dataloader_idx` argument in "
            f"{where}, so it could not tell their batches apart. Add `dataloader_idx=0` to its signature.")


def _step_parameters(module: Any, name: str) -> Mapping[str, inspect.Parameter]:
    """The parameters of the module's ``name`` as the user wrote it, without ``self``.

    A method of the module's class is read through its bound method (``inspect`` drops ``self`` and follows a
    decorator's ``__wrapped__``). A wrapper set on the instance (FSDP2's ``register_fsdp_forward_method``,
    ``torch.compile`` of the bound method, any ``functools.wraps`` wrapper) reports the bound method's
    signature as its own, and binding it to the module drops one more parameter: it is peeled down to the
    bound method it wraps.
    """
    step = getattr(module, name)
    if name in getattr(module, "__dict__", {}):
        while (inner := getattr(step, "__wrapped__", None)) is not None:
            step = inner
            if inspect.ismethod(step):
                break
    return inspect.signature(step).parameters


def call_step(module: Any, stage: str, batch: Any, batch_idx: int, dataloader_idx: int, trainer: Any = None) -> Any:
    """Call the module's ``*_step`` for ``stage`` with the arguments it takes (``batch``, ``batch_idx``,
    ``dataloader_idx``). An evaluation step gets the dataloader index only when the stage has several loaders, as
    Lightning passes it: by keyword to a ``dataloader_idx`` parameter, else in the third position (``*args``)."""
    name = STEP_METHODS[stage]
    method = getattr(module, name)
    key = (type(module), name)
    arity = _step_arity.get(key)
    if name in getattr(module, "__dict__", ()):
        arity = _arity(module, name)  # a step set on this instance (e.g. FSDP's wrapper): its class says nothing
    elif arity is None:
        arity = _step_arity[key] = _arity(module, name)
    if arity == 1:
        return method(batch, batch_idx)
    if arity == 2 and (stage == "train" or trainer is None):
        return method(batch, batch_idx, dataloader_idx=dataloader_idx)
    if arity >= 2:  # an evaluation step gets the index only while several loaders run (its default otherwise)
        if stage != "train" and trainer is not None and trainer.loop.log_context.num_dataloaders > 1:
            return method(batch, batch_idx, dataloader_idx=dataloader_idx) if arity == 2 else \
                method(batch, batch_idx, dataloader_idx)
        return method(batch, batch_idx)
    return method(batch)


class Defaults:
    """Fallback answers to the role hooks."""

    identity = IDENTITY

    @hookimpl(trylast=True)
    def distributed_info(self) -> dict:
        return {"global_rank": 0, "local_rank": 0, "node_rank": 0, "world_size": 1}

    @hookimpl(trylast=True)
    def root_device(self) -> torch.device:
        return torch.device("cpu")

    @hookimpl(trylast=True)
    def batch_to_device(self, batch: Any, device: torch.device) -> Any:
        return move_to_device(batch, device, non_blocking=device.type != "cpu")

    @hookimpl(trylast=True)
    def step(self, trainer: Any, model: Any, module: Any, batch: Any, batch_idx: int, dataloader_idx: int,
             stage: str) -> Any:
        if stage == "train" and model is not module and model is not None:
            return model(batch, batch_idx)  # a strategy's wrapped model runs training_step in its forward
        return call_step(module, stage, batch, batch_idx, dataloader_idx, trainer)

    @hookimpl(trylast=True)
    def backward(self, trainer: Any, loss: torch.Tensor) -> bool:
        args, kwargs = trainer.loop.training.backward_args  # manual_backward(loss, retain_graph=True, ...)
        loss.backward(*args, **kwargs)
        return True

    @hookimpl(trylast=True)
    @noop_fallback  # nothing to unscale: alone, the loop skips the call
    def unscale_gradients(self) -> bool:
        return True

    @hookimpl(trylast=True)
    def clip_gradients(self, optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str) -> Any:
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
            return True
        return torch.nn.utils.clip_grad_norm_(params, clip_val)

    @hookimpl(trylast=True)
    def optimizer_step(self, trainer: Any, optimizer: torch.optim.Optimizer) -> bool:
        # a closure and keywords given to opt.step(closure, **kwargs) are passed on (outside a run: none)
        training = trainer.loop.training if trainer is not None else None
        if training is None:
            optimizer.step()
        elif training.step_closure is None and not training.step_kwargs:
            training.step_result = optimizer.step()  # what opt.step() returns under manual optimization
        else:
            training.step_result = optimizer.step(closure=training.step_closure, **training.step_kwargs)
        return True

    @hookimpl(trylast=True)
    def zero_grad(self, optimizer: torch.optim.Optimizer) -> bool:
        optimizer.zero_grad(set_to_none=True)
        return True

    @hookimpl(trylast=True)
    def model_sharded_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    @hookimpl(trylast=True)
    def setup_module(self, module: torch.nn.Module) -> Any:
        return module

    @hookimpl(trylast=True)
    def process_dataloader(self, dataloader: Any) -> Any:
        return dataloader

    @hookimpl(trylast=True)
    def reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @hookimpl(trylast=True)
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.unsqueeze(0)

    @hookimpl(trylast=True)
    def broadcast(self, obj: Any) -> Any:
        return obj

    @hookimpl(trylast=True)
    def barrier(self) -> bool:
        return True

    @hookimpl(trylast=True)
    def reduce_boolean_decision(self, decision: bool) -> bool:
        return bool(decision)
