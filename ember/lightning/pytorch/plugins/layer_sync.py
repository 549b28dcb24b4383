"""``LayerSync`` and ``TorchSyncBatchNorm``: Lightning's plugin that turns a model's batch-norm layers into
synchronised ones. In ember, ``Trainer(sync_batchnorm=True)`` does this for a multi-process run; the plugin's
``apply``/``revert`` are there for code that calls them on a model itself."""

from __future__ import annotations

import abc

import torch

__all__ = ["LayerSync", "TorchSyncBatchNorm"]


class LayerSync(abc.ABC):
    """Converts layers of a model into ones that synchronise across processes, and back."""

    @abc.abstractmethod
    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model with its layers made synchronised."""

    @abc.abstractmethod
    def revert(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model with its synchronised layers made ordinary again."""


class TorchSyncBatchNorm(LayerSync):
    """``torch.nn.SyncBatchNorm`` in place of every ``BatchNorm1d/2d/3d`` (``Trainer(sync_batchnorm=True)`` in a
    run). :meth:`revert` gives the layers :meth:`apply` converted their own classes back."""

    _KINDS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)

    def __init__(self) -> None:
        self.converted: dict[str, type[torch.nn.Module]] = {}

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        self.converted = {name: type(m) for name, m in model.named_modules() if isinstance(m, self._KINDS)}
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)

    def revert(self, model: torch.nn.Module, prefix: str = "") -> torch.nn.Module:
        converted = model
        kind = self.converted.get(prefix)
        if isinstance(model, torch.nn.SyncBatchNorm) and kind is not None:
            converted = kind(model.num_features, model.eps, model.momentum, model.affine, model.track_running_stats)
            converted.load_state_dict(model.state_dict())  # the running statistics
            if model.affine:  # the same parameters, as an optimizer may hold them
                converted.weight = model.weight
                converted.bias = model.bias
            converted.train(model.training)
        for name, child in model.named_children():
            converted.add_module(name, self.revert(child, f"{prefix}.{name}" if prefix else name))
        return converted
