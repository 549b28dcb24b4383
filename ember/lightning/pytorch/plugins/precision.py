"""``lightning.pytorch.plugins.precision``'s classes as ember plugins (see :mod:`ember.lightning.seed`).

``Trainer(plugins=[MixedPrecision("bf16-mixed", "cpu")])`` runs as ``Trainer(precision="bf16-mixed")``; a
subclass's override of a Lightning method (``pre_backward``, ``backward``, ``post_backward``,
``optimizer_step``, ``clip_gradients``, ``convert_input``, ``convert_module``, ``forward_context``,
``train_step_context``, ``connect``, ``state_dict``, ...) is called where Lightning calls it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.lightning._names import unsupported
from ember.lightning.seed import SeedPlugin, add_forwarders, base_hook
from ember.plugins.precision import default_dtype
from ember.plugins.precision.bf16_mixed import BF16Mixed
from ember.plugins.precision.bf16_true import BF16True
from ember.plugins.precision.fp16_mixed import FP16Mixed
from ember.plugins.precision.fp16_true import FP16True
from ember.plugins.precision.fp64_true import FP64True

__all__ = ["BitsandbytesPrecision", "DeepSpeedPrecision", "DoublePrecision", "FSDPPrecision", "HalfPrecision",
           "MixedPrecision", "Precision", "TransformerEnginePrecision", "XLAPrecision"]

#: The ember hooks a Precision answers through Lightning's methods (the rest of a built-in's are forwarded).
THROUGH_METHODS = frozenset({"step", "convert_module", "convert_input", "backward", "optimizer_step",
                             "clip_gradients", "setup_module", "configure"})
_STEP_CONTEXTS = {"train": "train_step_context", "validate": "val_step_context", "test": "test_step_context",
                  "predict": "predict_step_context"}


class Precision(SeedPlugin):
    """Lightning's ``Precision``: float32, the plain PyTorch way. Subclass it to change one part of the work."""

    role = "precision"
    precision: str = "32-true"
    _closure_loss: Any = None

    @property
    def identity(self) -> str:
        return f"precision.{self.precision}"

    # -- Lightning's methods ---------------------------------------------------------------------------
    def connect(self, model: Any, optimizers: list, lr_schedulers: list) -> tuple[Any, list, list]:
        """Called once per fit with the model and its optimizers; may return replacements."""
        return model, optimizers, lr_schedulers

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.delegate("convert_module", module, module=module)  # type: ignore[no-any-return]

    def convert_input(self, data: Any) -> Any:
        return self.delegate("convert_input", data, data=data)

    def convert_output(self, data: Any) -> Any:
        return data

    def forward_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def train_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def val_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def test_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def predict_step_context(self) -> contextlib.AbstractContextManager:
        return self.forward_context()

    def module_init_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def pre_backward(self, tensor: torch.Tensor, module: Any) -> torch.Tensor:
        """The loss before ``backward`` (16-mixed scales it here). ``on_before_backward`` has run already."""
        return tensor

    def backward(self, tensor: torch.Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        """The backward pass: the module's ``backward`` (Lightning's hook), else ``tensor.backward()``."""
        if _module_backward(model):
            model.backward(tensor, *args, **kwargs)
        else:
            tensor.backward(*args, **kwargs)

    def post_backward(self, tensor: torch.Tensor, module: Any) -> torch.Tensor:
        """After the backward pass, before ``on_after_backward``."""
        return tensor

    def optimizer_step(self, optimizer: Any, model: Any, closure: Any, **kwargs: Any) -> Any:
        """Step the optimizer. ``closure()`` returns this step's loss (training step and backward have run
        already: ember calls this after them, where Lightning runs them inside the closure)."""
        answer = self.delegate("optimizer_step", None, optimizer=optimizer, module=model)
        return optimizer.step(closure=closure, **kwargs) if answer is None else self._stepped()

    def _stepped(self) -> Any:
        """What the optimizer's step returned, when the inner ember plugin stepped it (it records that)."""
        return getattr(getattr(getattr(self._trainer, "loop", None), "training", None), "step_result", None)

    def clip_gradients(self, optimizer: Any, clip_val: float = 0.0, gradient_clip_algorithm: Any = "norm") -> None:
        if clip_val <= 0:
            return
        if gradient_clip_algorithm == "value":
            self.clip_grad_by_value(optimizer, clip_val)
        elif gradient_clip_algorithm == "norm":
            self.clip_grad_by_norm(optimizer, clip_val)

    def clip_grad_by_value(self, optimizer: Any, clip_val: float) -> None:
        torch.nn.utils.clip_grad_value_(list(self.main_params(optimizer)), clip_val)

    def clip_grad_by_norm(self, optimizer: Any, clip_val: float) -> None:
        torch.nn.utils.clip_grad_norm_(list(self.main_params(optimizer)), clip_val)

    def main_params(self, optimizer: Any) -> Iterator[torch.nn.Parameter]:
        for group in optimizer.param_groups:
            yield from group["params"]

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    @base_hook
    def teardown(self) -> None:
        """Called at the end of a run (ember's ``teardown`` event) when a subclass overrides it."""

    # -- the adapter: ember's hooks call Lightning's methods -------------------------------------------
    @hookimpl(specname="convert_module")
    def _ember_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self.convert_module(module)

    @hookimpl(specname="convert_input")
    def _ember_convert_input(self, data: Any) -> Any:
        return self.convert_input(data)

    @hookimpl(specname="step", wrapper=True)
    def _ember_step(self, stage: str) -> Generator[None, Any, Any]:
        with getattr(self, _STEP_CONTEXTS[stage])():
            return (yield)

    @hookimpl(specname="backward", tryfirst=True)  # first: the precision calls the module's backward, as in Lightning
    def _ember_backward(self, trainer: Any, loss: torch.Tensor, optimizer: Any) -> bool:
        module = trainer.module
        args, kwargs = trainer.loop.training.backward_args
        loss = self.pre_backward(loss, module)
        self.backward(loss, module, optimizer, *args, **kwargs)
        self._closure_loss = self.post_backward(loss, module)
        return True

    @hookimpl(specname="clip_gradients")
    def _ember_clip_gradients(self, optimizer: Any, clip_val: float, algorithm: str) -> bool:
        self.clip_gradients(optimizer, clip_val, algorithm)
        return True

    @hookimpl(specname="optimizer_step")
    def _ember_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> bool:
        loss, self._closure_loss = self._closure_loss, None
        training = trainer.loop.training
        # the loop's closure when it hands one (an optimizer that evaluates it itself), else this step's loss; handed
        # on as ``closure`` alone, so that an inner ember plugin does not evaluate it too
        closure, training.step_closure = training.step_closure or (lambda: loss), None
        training.step_result = self.optimizer_step(optimizer, module, closure)
        return True

    @hookimpl(specname="setup_module", wrapper=True)
    def _ember_setup_module(self, trainer: Any, module: Any) -> Generator[None, Any, Any]:
        model = yield
        connected, optimizers, _ = self.connect(module if model is None else model, list(trainer.optimizers),
                                                list(trainer.lr_scheduler_configs))
        if list(optimizers) != list(trainer.optimizers):
            trainer.optimizers[:] = optimizers
        return model if connected is (module if model is None else model) else connected


def _module_backward(model: Any) -> bool:
    """True when ``model`` has Lightning's ``backward(loss, ...)`` hook (an ember/Lightning module's)."""
    from ember.core.api.module import Module

    return isinstance(model, Module)


_MIXED = {"16-mixed": (FP16Mixed, torch.float16), "bf16-mixed": (BF16Mixed, torch.bfloat16)}


class MixedPrecision(Precision):
    """``MixedPrecision("16-mixed" | "bf16-mixed", device, scaler=None)``: ember's ``precision.16-mixed`` or
    ``precision.bf16-mixed`` (float32 parameters, the steps under ``torch.autocast``; 16-mixed scales the loss)."""

    def __init__(self, precision: str, device: str, scaler: torch.amp.GradScaler | None = None) -> None:
        if precision not in _MIXED:
            raise ConfigurationError(f"MixedPrecision(precision={precision!r}): expected '16-mixed' or 'bf16-mixed'.")
        if scaler is not None and precision == "bf16-mixed":
            raise ConfigurationError("MixedPrecision('bf16-mixed', scaler=...): bf16 needs no gradient scaler.")
        self.precision = precision
        self.device = device
        self._scaler = scaler

    @property
    def plugin_class(self) -> type:  # type: ignore[override]
        return _MIXED[self.precision][0]

    def plugin_arguments(self) -> dict[str, Any]:
        return {"scaler": self._scaler} if self.precision == "16-mixed" else {}

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        return self.plugin.scaler if self.precision == "16-mixed" else None

    def forward_context(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device, dtype=_MIXED[self.precision][1])

    def pre_backward(self, tensor: torch.Tensor, module: Any) -> torch.Tensor:
        scaler = self.scaler
        return scaler.scale(tensor) if scaler is not None else tensor

    def optimizer_step(self, optimizer: Any, model: Any, closure: Any, **kwargs: Any) -> Any:
        if self.scaler is None:
            return super().optimizer_step(optimizer, model, closure, **kwargs)
        closure()
        self.delegate("optimizer_step", None, optimizer=optimizer, module=model)
        return self._stepped()

    def state_dict(self) -> dict[str, Any]:
        scaler = self.scaler
        return scaler.state_dict() if scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)


add_forwarders(MixedPrecision, FP16Mixed, BF16Mixed, skip=THROUGH_METHODS)


_HALF = {"16-true": (FP16True, torch.float16), "bf16-true": (BF16True, torch.bfloat16)}


class _TruePrecision(Precision):
    """Parameters, inputs and new tensors in one dtype (ember's ``precision.<n>-true``)."""

    dtype: torch.dtype = torch.float64

    def forward_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.dtype)

    def module_init_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.dtype)

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.dtype)


class HalfPrecision(_TruePrecision):
    """``HalfPrecision("16-true" | "bf16-true")``: ember's ``precision.16-true`` / ``precision.bf16-true``."""

    def __init__(self, precision: str = "16-true") -> None:
        if precision not in _HALF:
            raise ConfigurationError(f"HalfPrecision(precision={precision!r}): expected '16-true' or 'bf16-true'.")
        self.precision = precision
        self.dtype = _HALF[precision][1]

    @property
    def plugin_class(self) -> type:  # type: ignore[override]
        return _HALF[self.precision][0]


class DoublePrecision(_TruePrecision):
    """``DoublePrecision()``: ember's ``precision.64-true``."""

    precision = "64-true"
    plugin_class = FP64True


#: Placeholders: they import (and can be subclassed or named in isinstance) and raise when constructed.
BitsandbytesPrecision = unsupported(
    "BitsandbytesPrecision", "ember has no BitsandbytesPrecision: bitsandbytes quantization is not supported; "
    "train in precision='bf16-true' or 'bf16-mixed'.", __name__)
DeepSpeedPrecision = unsupported(
    "DeepSpeedPrecision", "ember has no DeepSpeedPrecision: ember does not run DeepSpeed; pass "
    "Trainer(precision='16-mixed' or 'bf16-mixed') with strategy='fsdp'.", __name__)
FSDPPrecision = unsupported(
    "FSDPPrecision", "ember has no FSDPPrecision: under strategy='fsdp' pass the precision by name, e.g. "
    "Trainer(strategy='fsdp', precision='bf16-mixed').", __name__)
TransformerEnginePrecision = unsupported(
    "TransformerEnginePrecision", "ember has no TransformerEnginePrecision: NVIDIA Transformer Engine (FP8) is "
    "not supported; use precision='bf16-mixed'.", __name__)
XLAPrecision = unsupported(
    "XLAPrecision", "ember has no XLAPrecision: ember does not run on XLA/TPU devices; use accelerator='cpu' or "
    "'cuda' with a precision by name.", __name__)
