"""``lightning.pytorch.strategies.deepspeed``: ``DeepSpeedStrategy``, a placeholder (ember does not run DeepSpeed)."""

from __future__ import annotations

from ember.lightning._names import unsupported

__all__ = ["DeepSpeedStrategy"]

#: It imports (and can be subclassed or named in isinstance) and raises when constructed.
DeepSpeedStrategy = unsupported("DeepSpeedStrategy", "ember has no DeepSpeedStrategy: ember does not run DeepSpeed; "
                                "shard the model with strategy='fsdp' (FSDP2) instead.", __name__)
