"""``lightning.pytorch.utilities.model_summary``: the layer table of a module, as objects.

The figures are those of ember's ``callback.model-summary`` (:func:`ember.plugins.callbacks.model_summary.summarize`);
input and output sizes are recorded by a forward pass on the module's ``example_input_array`` when it has one
(``"?"`` otherwise).
"""

from __future__ import annotations

from typing import Any

import torch

from ember.plugins.callbacks.model_summary import summarize as _summarize

UNKNOWN_SIZE = "?"
_UNITS = ("", "K", "M", "B", "T")


def parse_batch_shape(batch: Any) -> Any:
    """The shape of every tensor in ``batch`` (nested lists and tuples kept), ``"?"`` for anything else."""
    if hasattr(batch, "shape"):
        return list(batch.shape)
    if isinstance(batch, (list, tuple)):
        return [parse_batch_shape(el) for el in batch]
    return UNKNOWN_SIZE


def get_human_readable_count(number: int | float) -> str:
    """``123`` -> ``"123  "``, ``1234`` -> ``"1.2 K"``, ``2e6`` -> ``"2.0 M"``, ``4e14`` -> ``"400 T"``."""
    if number < 0:
        raise ValueError(f"get_human_readable_count({number}): expected a number >= 0.")
    digits = len(str(int(number))) if number >= 1 else 1
    index = min(max((digits - 1) // 3, 0), len(_UNITS) - 1)
    scaled = number / 10 ** (3 * index)
    unit = _UNITS[index]
    if index == 0:
        return f"{int(number):,d} " + " "
    if scaled >= 100:
        return f"{int(scaled):,d} {unit}"
    return f"{scaled:,.1f} {unit}"


def get_formatted_model_size(total_model_size: float) -> str:
    """A size in MB with three decimals."""
    return f"{total_model_size:,.3f}"


class LayerSummary:
    """One layer: its type, parameter count, and input/output sizes once a forward pass has run."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module
        self._in_size: Any = UNKNOWN_SIZE
        self._out_size: Any = UNKNOWN_SIZE
        self._hook = module.register_forward_hook(self._record) if not isinstance(module, torch.jit.ScriptModule) \
            else None

    def _record(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        self._in_size = parse_batch_shape(inputs[0] if len(inputs) == 1 else inputs)
        self._out_size = parse_batch_shape(output)
        self.detach_hook()

    def detach_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @property
    def in_size(self) -> Any:
        return self._in_size

    @property
    def out_size(self) -> Any:
        return self._out_size

    @property
    def layer_type(self) -> str:
        return type(self._module).__name__

    @property
    def training(self) -> bool:
        return self._module.training

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self._module.parameters())


class ModelSummary:
    """The layers of ``model`` to ``max_depth`` (-1: all, 0: none) with their parameter counts, and the totals;
    ``str()`` is the table ember's model-summary callback prints."""

    def __init__(self, model: torch.nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth!r}): expected -1 (all), 0 or more.")
        self._model = model
        self._max_depth = max_depth
        self._summary = _summarize(model, max_depth) if max_depth != 0 else None
        self._layer_summary = {name: LayerSummary(sub) for name, sub in self.named_modules}
        example = getattr(model, "example_input_array", None)
        if example is not None and self._layer_summary:
            self._forward_example_input(example)
        for layer in self._layer_summary.values():
            layer.detach_hook()

    def _forward_example_input(self, example: Any) -> None:
        mode = self._model.training
        self._model.eval()
        with torch.no_grad():
            if isinstance(example, (list, tuple)):
                self._model(*example)
            elif isinstance(example, dict):
                self._model(**example)
            else:
                self._model(example)
        self._model.train(mode)

    @property
    def named_modules(self) -> list[tuple[str, torch.nn.Module]]:
        if self._max_depth == 0:
            return []
        return [(name, sub) for name, sub in self._model.named_modules()
                if name and (self._max_depth == -1 or name.count(".") + 1 <= self._max_depth)]

    @property
    def layer_names(self) -> list[str]:
        return list(self._layer_summary)

    @property
    def layer_types(self) -> list[str]:
        return [layer.layer_type for layer in self._layer_summary.values()]

    @property
    def in_sizes(self) -> list[Any]:
        return [layer.in_size for layer in self._layer_summary.values()]

    @property
    def out_sizes(self) -> list[Any]:
        return [layer.out_size for layer in self._layer_summary.values()]

    @property
    def param_nums(self) -> list[int]:
        return [layer.num_parameters for layer in self._layer_summary.values()]

    @property
    def training_modes(self) -> list[bool]:
        return [layer.training for layer in self._layer_summary.values()]

    @property
    def total_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self._model.parameters()}.values())

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self._model.parameters()}.values() if p.requires_grad)

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        """The parameters' size in MB."""
        return sum(p.numel() * p.element_size() for p in {id(p): p for p in self._model.parameters()}.values()) / 1e6

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def __str__(self) -> str:
        return str(self._summary if self._summary is not None else _summarize(self._model, 0))

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: torch.nn.Module, max_depth: int = 1) -> ModelSummary:
    """``ModelSummary(lightning_module, max_depth)``."""
    return ModelSummary(lightning_module, max_depth=max_depth)


class DeepSpeedSummary(ModelSummary):
    """Lightning's summary of a DeepSpeed-partitioned module: ember has no DeepSpeed strategy."""

    def __init__(self, model: torch.nn.Module, max_depth: int = 1) -> None:
        raise NotImplementedError("DeepSpeedSummary needs DeepSpeed, which ember does not support: use "
                                  "ModelSummary (the fsdp strategy shards a module in ember).")


__all__ = ["DeepSpeedSummary", "LayerSummary", "ModelSummary", "get_formatted_model_size",
           "get_human_readable_count", "parse_batch_shape", "summarize"]
