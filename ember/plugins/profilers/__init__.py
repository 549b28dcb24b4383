"""Profilers: plugins of the ``profiler`` role, selected with ``Trainer(profiler=...)`` (a name such as
``"simple"`` or ``"torch"``, an identity, or a profiler object). None is on by default, and a run without one
pays nothing for them.

* ``profiler.simple`` (:class:`~ember.plugins.profilers.simple.SimpleProfiler`): time per hook and per
  phase of the run, as a table printed and written at the end of each run.
* ``profiler.torch`` (:class:`~ember.plugins.profilers.torch_profiler.TorchProfiler`): ``torch.profiler``
  over the run, written as a Chrome trace that Perfetto or ``chrome://tracing`` opens, with ember's steps
  labelled.

What they share: where the output goes.
"""

from __future__ import annotations

import os
from typing import Any


def output_path(trainer: Any, dirpath: str | os.PathLike | None, filename: str, suffix: str) -> str:
    """``<dir>/<filename>-<fn>[-rank<r>]<suffix>``; the directory is ``dirpath``, else the first logger's
    version folder, else ``default_root_dir``."""
    if dirpath is not None:
        folder = os.fspath(dirpath)
    else:
        folder = getattr(trainer, "log_dir", None) or trainer.default_root_dir
    fn = trainer.state.get("fn") or "run"
    rank = f"-rank{trainer.global_rank}" if trainer.world_size > 1 else ""
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{filename}-{fn}{rank}{suffix}")
