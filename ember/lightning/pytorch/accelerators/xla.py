"""``lightning.pytorch.accelerators.xla``: ``XLAAccelerator``, a placeholder (ember does not run on XLA/TPU)."""

from __future__ import annotations

from ember.lightning._names import unsupported

__all__ = ["XLAAccelerator"]

#: It imports, is never available, and raises when constructed.
XLAAccelerator = unsupported("XLAAccelerator", "ember has no XLAAccelerator: ember does not run on XLA/TPU devices; "
                             "use accelerator='cpu' or 'cuda'.", __name__)
XLAAccelerator.is_available = staticmethod(lambda: False)  # type: ignore[attr-defined]
XLAAccelerator.auto_device_count = staticmethod(lambda: 0)  # type: ignore[attr-defined]
