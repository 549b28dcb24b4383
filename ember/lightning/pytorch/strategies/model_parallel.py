"""``lightning.pytorch.strategies.model_parallel``: ``ModelParallelStrategy``, a placeholder (no tensor
parallelism in ember)."""

from __future__ import annotations

from ember.lightning._names import unsupported

__all__ = ["ModelParallelStrategy"]

#: It imports (and can be subclassed or named in isinstance) and raises when constructed.
ModelParallelStrategy = unsupported("ModelParallelStrategy", "ember has no ModelParallelStrategy: tensor parallelism "
                                    "is not supported; shard the model with strategy='fsdp' and configure_model.",
                                    __name__)
