"""Reading ``torch.distributed.checkpoint`` (DCP) directories without running code from them.

DCP's own reader unpickles the ``.metadata`` file with :func:`pickle.load` and its default planner unpickles
every non-tensor value with ``torch.load(weights_only=False)``: a crafted directory runs code on whoever loads
it. Here ``.metadata`` goes through :class:`MetadataUnpickler`, which builds only DCP's metadata records, torch
sizes, dtypes, layouts and paths (anything else is refused by name, nothing is called), its content is checked
(every shard file a plain name inside the directory), and non-tensor values load with ``weights_only=True``.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from ember.core.errors import CheckpointError

_DCP = "torch.distributed.checkpoint"
#: (module, name) -> what may be built; classes are created without calling their ``__init__`` (NEWOBJ/BUILD).
_ALLOWED: dict[tuple[str, str], Any] = {
    (f"{_DCP}.metadata", "Metadata"): Metadata,
    (f"{_DCP}.metadata", "TensorStorageMetadata"): TensorStorageMetadata,
    (f"{_DCP}.metadata", "BytesStorageMetadata"): BytesStorageMetadata,
    (f"{_DCP}.metadata", "ChunkStorageMetadata"): ChunkStorageMetadata,
    (f"{_DCP}.metadata", "TensorProperties"): TensorProperties,
    (f"{_DCP}.metadata", "MetadataIndex"): MetadataIndex,
    (f"{_DCP}.metadata", "StorageMeta"): StorageMeta,
    (f"{_DCP}.metadata", "_MEM_FORMAT_ENCODING"): None,  # filled below
    (f"{_DCP}.filesystem", "_StorageInfo"): None,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): None,
    ("pathlib", "PosixPath"): None,
    ("pathlib", "WindowsPath"): None,
    ("pathlib", "PurePosixPath"): None,
    ("pathlib", "PureWindowsPath"): None,
    ("collections", "OrderedDict"): None,
}


def _allowed() -> dict[tuple[str, str], Any]:
    import pathlib
    from collections import OrderedDict

    from torch.distributed.checkpoint import filesystem, metadata

    found = dict(_ALLOWED)
    found[(f"{_DCP}.metadata", "_MEM_FORMAT_ENCODING")] = metadata._MEM_FORMAT_ENCODING
    found[(f"{_DCP}.filesystem", "_StorageInfo")] = filesystem._StorageInfo
    found[("torch.serialization", "_get_layout")] = _get_layout
    found[("pathlib", "PosixPath")] = found[("pathlib", "PurePosixPath")] = pathlib.PurePosixPath
    found[("pathlib", "WindowsPath")] = found[("pathlib", "PureWindowsPath")] = pathlib.PureWindowsPath
    found[("collections", "OrderedDict")] = OrderedDict
    return found


def _get_layout(name: Any) -> torch.layout:
    layout = getattr(torch, str(name).removeprefix("torch."), None) if isinstance(name, str) else None
    if not isinstance(layout, torch.layout):
        raise pickle.UnpicklingError(f"unknown tensor layout {name!r}")
    return layout


class MetadataUnpickler(pickle.Unpickler):  # safe: find_class allows only DCP metadata types
    """Unpickles DCP metadata and nothing else."""

    def __init__(self, file: Any, source: str) -> None:
        super().__init__(file)
        self.source = source
        self.allowed = _allowed()

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.layout, torch.memory_format)):
            return getattr(torch, name)
        found = self.allowed.get((module, name))
        if found is None:
            raise CheckpointError(f"{self.source} refers to {module}.{name}, which is not part of a DCP checkpoint's "
                                  "metadata; ember refuses to build it (nothing in the file was run). The file is "
                                  "damaged or was crafted to run code.")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointError(f"{self.source} holds a persistent reference ({str(pid)[:60]!r}), which DCP metadata "
                              "never does; ember refuses it.")


def read_metadata(folder: str) -> Metadata:
    """The ``.metadata`` of the DCP directory ``folder``, read with :class:`MetadataUnpickler` and checked."""
    path = os.path.join(folder, ".metadata")
    try:
        with open(path, "rb") as f:
            metadata = MetadataUnpickler(f, path).load()  # safe: restricted unpickler
    except CheckpointError:
        raise
    except Exception as exc:  # any malformed pickle: a clear error, never a traceback from pickle's insides
        raise CheckpointError(f"{path} is damaged: it cannot be read as DCP metadata ({type(exc).__name__}: "
                              f"{str(exc)[:200]}).") from None
    _check_metadata(metadata, path, folder)
    return metadata


def _check_metadata(metadata: Any, path: str, folder: str) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path} is damaged: {what}.")

    if not isinstance(metadata, Metadata):
        raise bad(f"it holds a {type(metadata).__name__}, not DCP metadata")
    if not isinstance(metadata.state_dict_metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, (TensorStorageMetadata, BytesStorageMetadata))
            for k, v in metadata.state_dict_metadata.items()):
        raise bad("its table of entries is malformed")
    for key, meta in metadata.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata) and not (
                isinstance(meta.size, torch.Size) and isinstance(meta.properties, TensorProperties)
                and isinstance(meta.properties.dtype, torch.dtype)):
            raise bad(f"the entry {key!r} is malformed")
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        raise bad("its table of shard files is missing")
    for index, info in storage.items():
        if not isinstance(index, MetadataIndex) or not isinstance(info, _StorageInfo):
            raise bad("its table of shard files is malformed")
        name = info.relative_path
        if not isinstance(name, str) or not name or name != os.path.basename(name) or name in (".", "..") \
                or "\\" in name or "/" in name:
            raise bad(f"it names the shard file {name!r}, which is not a file inside {folder}")
        if not isinstance(info.offset, int) or not isinstance(info.length, int) or info.offset < 0 or info.length < 0:
            raise bad(f"the shard {index.fqn!r} has an invalid position in {name}")
    if metadata.planner_data is not None and not isinstance(metadata.planner_data, dict):
        raise bad("its planner data is malformed")


def shard_files(metadata: Metadata) -> list[str]:
    """The shard files the metadata reads from."""
    return sorted({info.relative_path for info in metadata.storage_data.values()})


class SafeReader(FileSystemReader):
    """DCP's file-system reader with :func:`read_metadata` in place of ``pickle.load``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = read_metadata(os.fspath(self.path))
        storage_meta = metadata.storage_meta if isinstance(metadata.storage_meta, StorageMeta) else StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, reading non-tensor values with ``torch.load(weights_only=True)``."""

    #: The directory being read, for messages.
    source = "a sharded checkpoint"

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except Exception as exc:
            raise CheckpointError(f"the value {read_item.dest_index.fqn!r} of {self.source} is not plain data "
                                  f"a weights-only load can rebuild ({str(exc).splitlines()[0][:200]}); nothing in "
                                  "it was run.") from None
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element

            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
