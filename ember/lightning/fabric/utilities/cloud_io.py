"""``lightning.fabric.utilities.cloud_io``: reading and writing checkpoint files by path, URL or file object.

Lightning's tests and much user code read a checkpoint with ``from lightning.fabric.utilities.cloud_io import
_load as pl_load``. Here that read goes through ember's safe loader: ``torch.load(weights_only=True)`` unless the
caller passes ``weights_only=False`` itself (then with ember's :class:`UnsafeLoadWarning`), a local file checked
first (zip format, checksums) and every failure a :class:`ember.CheckpointError` naming the file. Nothing in the
file runs. Unlike Lightning, a remote file is read with ``weights_only=True`` too.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import IO, Any

import torch

from ember.core.errors import CheckpointError
from ember.plugins._shared.checkpoint_files import atomic_save, safe_load, warn_unsafe_load
from ember.plugins.checkpoint_io.torch_file import downloaded

__all__ = ["get_filesystem"]


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _load(path_or_url: IO[bytes] | str | os.PathLike, map_location: Any = None,
          weights_only: bool | None = None) -> Any:
    """The checkpoint at ``path_or_url`` (a local path, an ``http(s)://`` URL, an fsspec URL such as
    ``s3://...`` or ``memory://...``, or an open binary file). ``weights_only`` is True unless passed as False;
    ``map_location`` is ``torch.load``'s."""
    safe = weights_only is not False
    if not isinstance(path_or_url, (str, os.PathLike)):
        return _load_stream(path_or_url, str(getattr(path_or_url, "name", "the file object")), map_location, safe)
    path = os.fspath(path_or_url)
    path = path.removeprefix("file://")
    if path.startswith(("http://", "https://")):
        path = downloaded(path)  # torch hub's cache; read and checked like a local file
    elif _is_url(path):
        with get_filesystem(path).open(path, "rb") as f:
            return _load_stream(f, path, map_location, safe)
    return safe_load(path, weights_only=safe, map_location=map_location)


def _load_stream(f: IO[bytes], name: str, map_location: Any, safe: bool) -> Any:
    if not safe:
        warn_unsafe_load(name)
    try:
        return torch.load(f, map_location=map_location, weights_only=safe)
    except pickle.UnpicklingError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        detail = next((line.strip() for line in lines if "GLOBAL" in line), lines[0])[:300]
        raise CheckpointError(f"{name} cannot be read with weights_only=True: it holds Python objects other than "
                              f"tensors and plain containers ({detail}). Nothing in it was run.") from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        raise CheckpointError(f"{name} is not a readable torch checkpoint ({str(exc).splitlines()[0][:200]}).") \
            from None


def get_filesystem(path: str | os.PathLike, **kwargs: Any) -> Any:
    """The fsspec filesystem of ``path`` (the local one for a plain path); fsspec comes with torch."""
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - torch depends on fsspec
        raise CheckpointError(f"reading {os.fspath(path)} needs the fsspec package (pip install fsspec).") from exc
    fs, _ = fsspec.core.url_to_fs(str(path), **kwargs)
    return fs


def _atomic_save(checkpoint: dict[str, Any], filepath: str | os.PathLike) -> None:
    """Write ``checkpoint`` with ``torch.save``: a local file atomically (temporary file, fsync, rename), a URL
    through fsspec in one write."""
    path = os.fspath(filepath).removeprefix("file://")
    if not _is_url(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_save(checkpoint, path)
        return
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    with get_filesystem(path).open(path, "wb") as f:
        f.write(buffer.getvalue())
