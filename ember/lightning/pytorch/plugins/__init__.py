"""``lightning.pytorch.plugins``'s names: precision and checkpoint storage as ember plugins
(:mod:`ember.lightning.seed`), the cluster environments, and the batch-norm synchronisation."""

from __future__ import annotations

from ember.lightning.pytorch.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from ember.lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO, XLACheckpointIO
from ember.lightning.pytorch.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
from ember.lightning.pytorch.plugins.precision import (
    BitsandbytesPrecision,
    DeepSpeedPrecision,
    DoublePrecision,
    FSDPPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
    TransformerEnginePrecision,
    XLAPrecision,
)

__all__ = ["AsyncCheckpointIO", "BitsandbytesPrecision", "CheckpointIO", "ClusterEnvironment", "DeepSpeedPrecision",
           "DoublePrecision", "FSDPPrecision", "HalfPrecision", "LayerSync", "LightningEnvironment", "MixedPrecision",
           "Precision", "SLURMEnvironment", "TorchCheckpointIO", "TorchElasticEnvironment", "TorchSyncBatchNorm",
           "TransformerEnginePrecision", "XLACheckpointIO", "XLAPrecision"]
