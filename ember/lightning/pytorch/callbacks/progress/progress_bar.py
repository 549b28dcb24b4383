"""``lightning.pytorch.callbacks.progress.progress_bar``: ``ProgressBar``, the base of a custom bar, and
``get_standard_metrics`` (the ``v_num`` a bar shows)."""

from __future__ import annotations

from typing import Any

from ember.plugins.progress import ProgressBar

__all__ = ["ProgressBar", "get_standard_metrics"]


def get_standard_metrics(trainer: Any) -> dict[str, int | str]:
    """``{"v_num": version}`` of the trainer's loggers (the last 4 characters of a string version; several loggers'
    distinct versions joined by ``_``), or ``{}`` without a logger or a version."""
    versions: list[Any] = []
    for logger in getattr(trainer, "loggers", None) or []:
        version = getattr(logger, "version", None)
        if version not in versions:
            versions.append(version)
    if not versions:
        return {}
    version = versions[0] if len(versions) == 1 else "_".join(str(v) for v in versions)
    if version in ("", None):
        return {}
    return {"v_num": version[-4:] if isinstance(version, str) else version}
