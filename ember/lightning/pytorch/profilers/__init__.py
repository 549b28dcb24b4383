"""``lightning.pytorch.profilers``: Lightning's profiler classes, driven by ember's hook calls.

``Profiler`` (the base of a custom profiler), ``SimpleProfiler``, ``AdvancedProfiler`` and ``PassThroughProfiler``
time every hook call the loop makes (:mod:`ember.lightning.pytorch.profilers.profiler`); ``PyTorchProfiler`` is
ember's ``profiler.torch``. ``XLAProfiler`` needs XLA, which ember does not support.
"""

from __future__ import annotations

from ember.lightning._names import unsupported
from ember.lightning.pytorch.profilers.advanced import AdvancedProfiler
from ember.lightning.pytorch.profilers.profiler import PassThroughProfiler, Profiler
from ember.lightning.pytorch.profilers.pytorch import PyTorchProfiler
from ember.lightning.pytorch.profilers.simple import SimpleProfiler

XLAProfiler = unsupported("XLAProfiler", "ember has no XLAProfiler: ember does not run on XLA devices; use "
                          "PyTorchProfiler (Trainer(profiler='torch')) on CUDA or the CPU.", __name__)

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "XLAProfiler"]
