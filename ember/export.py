"""Exporting a trained module for serving: ONNX, ``torch.export`` and TorchScript.

Each helper puts the module in eval mode for the export and back in the mode it was in afterwards, and takes the
example input from the argument or, when none is given, from the module's ``example_input_array`` (Lightning's
attribute). :class:`ember.Module` has the three as methods: ``module.to_onnx(path)``,
``module.to_torchscript()``, ``module.export()``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from ember.core.errors import ConfigurationError

__all__ = ["export", "to_onnx", "to_torchscript"]


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _example(module: torch.nn.Module, given: Any, what: str) -> tuple:
    sample = given if given is not None else getattr(module, "example_input_array", None)
    if sample is None:
        raise ConfigurationError(f"{what} needs an example input: pass one (e.g. torch.randn(1, 8)) or set "
                                 f"`self.example_input_array` in {type(module).__name__}.__init__.")
    sample = sample if isinstance(sample, tuple) else (sample,)
    device = next((p.device for p in module.parameters()), None)
    if device is None:
        return sample
    return tuple(s.to(device) if isinstance(s, torch.Tensor) else s for s in sample)


def to_onnx(module: torch.nn.Module, file_path: str | os.PathLike, input_sample: Any = None,
            **kwargs: Any) -> str:
    """Write ``module`` as an ONNX model to ``file_path`` with :func:`torch.onnx.export` (keyword arguments are
    passed on, e.g. ``dynamic_shapes``, ``input_names``, ``dynamo=False``). Needs the ``export`` extra
    (``pip install 'ember[export]'``: onnx, onnxscript; add onnxruntime to run the file). Returns the path."""
    try:
        import onnx  # noqa: F401  (torch's exporter needs it; a clear error beats its ImportError)
    except ImportError as exc:
        raise ImportError("to_onnx needs the onnx package: pip install 'ember[export]'.") from exc
    sample = _example(module, input_sample, "to_onnx")
    path = os.fspath(file_path)
    with _eval_mode(module), warnings.catch_warnings():
        # torch's exporter trips over its own pytree deprecation; nothing the caller can act on
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        result = torch.onnx.export(module, sample, path, **kwargs)
    if result is not None and not os.path.exists(path):  # an ONNXProgram that was not written
        result.save(path)
    return path


def to_torchscript(module: torch.nn.Module, file_path: str | os.PathLike | None = None, method: str = "script",
                   example_inputs: Any = None, **kwargs: Any) -> torch.jit.ScriptModule:
    """Compile ``module`` to TorchScript by ``method="script"`` (:func:`torch.jit.script`) or ``"trace"``
    (:func:`torch.jit.trace` with ``example_inputs``, else ``example_input_array``); with ``file_path``, also
    save it there (load it with :func:`torch.jit.load`)."""
    if method not in ("script", "trace"):
        raise ConfigurationError(f"to_torchscript(method={method!r}) is invalid: expected 'script' or 'trace'.")
    sample = _example(module, example_inputs, "to_torchscript(method='trace')") if method == "trace" else None
    # TorchScript reads every attribute of the class; ember.Module.trainer answers None meanwhile.
    module.__dict__["_jit_is_scripting"] = True
    try:
        with _eval_mode(module):
            if method == "script":
                compiled = torch.jit.script(module, **kwargs)
            else:
                compiled = torch.jit.trace(module, sample, **kwargs)
    finally:
        module.__dict__.pop("_jit_is_scripting", None)
    if file_path is not None:
        torch.jit.save(compiled, os.fspath(file_path))
    return compiled


def export(module: torch.nn.Module, args: Any = None, file_path: str | os.PathLike | None = None,
           **kwargs: Any) -> torch.export.ExportedProgram:
    """Capture ``module``'s forward as a :class:`torch.export.ExportedProgram` (:func:`torch.export.export`;
    keyword arguments such as ``dynamic_shapes`` are passed on) from ``args`` (else ``example_input_array``); with
    ``file_path``, also save it (:func:`torch.export.save`; load with :func:`torch.export.load`)."""
    sample = _example(module, args, "export")
    with _eval_mode(module):
        program = torch.export.export(module, sample, **kwargs)
    if file_path is not None:
        torch.export.save(program, os.fspath(file_path))
    return program
