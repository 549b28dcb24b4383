"""``precision.tf32``: float32 parameters, float32 matmuls and convolutions allowed to use TensorFloat-32."""

from __future__ import annotations

import torch

import ember


class TF32Precision:
    """Sets ``torch.set_float32_matmul_precision("high")`` and cuDNN's TF32 switch for the duration of a run,
    forward and backward, and restores the previous settings afterwards (also after an error).

    On Ampere and newer GPUs float32 matmuls then run on tensor cores with a 10-bit mantissa; on other devices
    PyTorch picks the fastest kernels allowed at that precision. Parameters, gradients and optimizer state
    stay float32, so no gradient scaler is needed.
    """

    role = "precision"
    identity = "precision.tf32"

    def __init__(self, matmul_precision: str = "high") -> None:
        if matmul_precision not in ("high", "medium"):
            raise ember.ConfigurationError(
                f"TF32Precision(matmul_precision={matmul_precision!r}) is invalid: expected 'high' or 'medium'.")
        self.matmul_precision = matmul_precision
        self._saved: tuple[str, bool] | None = None

    @ember.hookimpl
    def setup(self) -> None:
        if self._saved is None:
            self._saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.backends.cudnn.allow_tf32 = True

    @ember.hookimpl
    def teardown(self) -> None:
        if self._saved is not None:
            torch.set_float32_matmul_precision(self._saved[0])
            torch.backends.cudnn.allow_tf32 = self._saved[1]
            self._saved = None

    def __repr__(self) -> str:
        return f"TF32Precision(matmul_precision={self.matmul_precision!r})"

