"""``callback.prediction-writer``: write what ``predict_step`` returns to files as prediction runs."""

from __future__ import annotations

import os
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class PredictionWriter:
    """Save predictions with ``torch.save`` so a long prediction run needs no memory for its outputs
    (pair it with ``trainer.predict(..., return_predictions=False)``).

    * ``write_interval="batch"``: one file per batch, ``<output_dir>/predictions_rank<r>_dl<d>_batch<b>.pt``,
      holding ``{"predictions": ..., "batch_idx": b, "dataloader_idx": d}``.
    * ``"epoch"``: one file per loader at the end, ``predictions_rank<r>_dl<d>.pt``, holding
      ``{"predictions": [one entry per batch, in order], "dataloader_idx": d}``.
    * ``"batch_and_epoch"``: both.

    :param output_dir: where to write; default ``<default_root_dir>/predictions``.

    Subclass and override :meth:`write_on_batch_end` / :meth:`write_on_epoch_end` to write another format.
    Files load with ``torch.load(path, weights_only=True)`` when the predictions are tensors and plain
    containers.
    """

    identity = "callback.prediction-writer"

    def __init__(self, output_dir: str | os.PathLike | None = None, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ConfigurationError(f"PredictionWriter(write_interval={write_interval!r}) is invalid: expected one "
                                     f"of {', '.join(_INTERVALS)}.")
        self.output_dir = os.fspath(output_dir) if output_dir is not None else None
        self.write_interval = write_interval
        self.written: list[str] = []
        self._epoch: dict[int, list[Any]] = {}

    def _dir(self, trainer: Any) -> str:
        path = self.output_dir or os.path.join(trainer.default_root_dir, "predictions")
        os.makedirs(path, exist_ok=True)
        return path

    def write_on_batch_end(self, trainer: Any, prediction: Any, batch_idx: int, dataloader_idx: int) -> None:
        path = os.path.join(self._dir(trainer),
                            f"predictions_rank{trainer.global_rank}_dl{dataloader_idx}_batch{batch_idx}.pt")
        self._save({"predictions": prediction, "batch_idx": batch_idx, "dataloader_idx": dataloader_idx}, path)

    def write_on_epoch_end(self, trainer: Any, predictions: list[Any], dataloader_idx: int) -> None:
        path = os.path.join(self._dir(trainer), f"predictions_rank{trainer.global_rank}_dl{dataloader_idx}.pt")
        self._save({"predictions": predictions, "dataloader_idx": dataloader_idx}, path)

    def _save(self, obj: Any, path: str) -> None:
        tmp = path + ".tmp"
        torch.save(_to_cpu(obj), tmp)
        os.replace(tmp, path)
        self.written.append(path)

    # -- hooks ---------------------------------------------------------------------------------------------
    @hookimpl
    def on_predict_start(self) -> None:
        self._epoch = {}

    @hookimpl
    def on_predict_batch_end(self, trainer: Any, outputs: Any, batch_idx: int, dataloader_idx: int) -> None:
        if self.write_interval in ("batch", "batch_and_epoch"):
            self.write_on_batch_end(trainer, outputs, batch_idx, dataloader_idx)
        if self.write_interval in ("epoch", "batch_and_epoch"):
            self._epoch.setdefault(dataloader_idx, []).append(_to_cpu(outputs))

    @hookimpl
    def on_predict_epoch_end(self, trainer: Any) -> None:
        for dataloader_idx, preds in sorted(self._epoch.items()):
            self.write_on_epoch_end(trainer, preds, dataloader_idx)
        self._epoch = {}


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj) if not hasattr(obj, "_fields") else type(obj)(*map(_to_cpu, obj))
    return obj
