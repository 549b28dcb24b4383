"""``lightning.pytorch.loggers.tensorboard``: ``TensorBoardLogger`` with Lightning's arguments and default folder
name.

It is ember's logger (:mod:`ember.plugins.loggers.tensorboard_logger`) whose runs go to ``<save_dir>/
lightning_logs/version_<n>`` unless ``name`` says otherwise, as Lightning's do (ember's own class uses
``ember_logs``); the arguments come in Lightning's order.
"""

# No ``from __future__ import annotations``: the signature's annotations are real types, which argument parsers
# (jsonargparse, LightningCLI) read.
import os
from typing import Any

from ember.lightning._names import LIGHTNING_LOGS, CoversEmber
from ember.plugins.loggers import tensorboard_logger as _ember


class TensorBoardLogger(_ember.TensorBoardLogger, metaclass=CoversEmber):
    """ember's ``TensorBoardLogger`` with Lightning's default ``name="lightning_logs"`` (other keywords, such as
    ember's ``hp_metric`` or ``SummaryWriter``'s, are passed on); every ember ``TensorBoardLogger`` counts as an
    instance of it."""

    _covers_ember = True

    def __init__(self, save_dir: str | os.PathLike | None = None, name: str | None = LIGHTNING_LOGS,
                 version: int | str | None = None, log_graph: bool = False, default_hp_metric: bool = True,
                 prefix: str = "", sub_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        super().__init__(save_dir=save_dir, name=name or "", version=version, prefix=prefix, log_graph=log_graph,
                         default_hp_metric=default_hp_metric, sub_dir=sub_dir, **kwargs)


__all__ = ["TensorBoardLogger"]
