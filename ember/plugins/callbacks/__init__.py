"""The everyday callbacks, one module each, declared as ``callback.<name>`` entry points.

Pass them to ``Trainer(callbacks=[...])`` as objects (``EarlyStopping(monitor="val_loss")``) or by name
(``"lr-monitor"``, ``"callback.lr-monitor"``) for their defaults. ``callback.model-summary`` and
``callback.timer`` are switched on by Trainer flags (``enable_model_summary``, ``max_time``), and
``callback.model-checkpoint`` by ``enable_checkpointing``.
"""

from __future__ import annotations

from ember.plugins.callbacks.early_stopping import EarlyStopping
from ember.plugins.callbacks.grad_norm import GradNormMonitor
from ember.plugins.callbacks.lr_monitor import LearningRateMonitor
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.callbacks.model_summary import ModelSummary
from ember.plugins.callbacks.nan_guard import NanGuard
from ember.plugins.callbacks.prediction_writer import PredictionWriter
from ember.plugins.callbacks.timer import Timer

__all__ = ["EarlyStopping", "GradNormMonitor", "LearningRateMonitor", "ModelCheckpoint", "ModelSummary", "NanGuard",
           "PredictionWriter", "Timer"]
