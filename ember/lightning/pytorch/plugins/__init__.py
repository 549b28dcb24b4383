"""``lightning.pytorch.plugins``'s names: precision and checkpoint storage as ember plugins
(:mod:`ember.lightning.seed`), and the cluster environments."""

from __future__ import annotations

from ember.lightning.pytorch.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from ember.lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from ember.lightning.pytorch.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "ClusterEnvironment", "DoublePrecision", "HalfPrecision",
           "LightningEnvironment", "MixedPrecision", "Precision", "SLURMEnvironment", "TorchCheckpointIO",
           "TorchElasticEnvironment"]
