"""``torch.save``'s file, written with less Python per object.

``torch.save`` pickles with a ``persistent_id`` that checks every object of a checkpoint for a storage (several
``isinstance`` calls each), and each tensor reduces itself through ``Tensor.__reduce_ex__`` (about 25 us of Python
per tensor: hooks, fake-tensor and backend checks, a ``TypedStorage`` wrapper). For a checkpoint of a small model
that Python is most of a save, and it runs under the training process's interpreter lock.

:func:`save` writes the same bytes (a test compares them with ``torch.save``'s) with a pickler whose
``persistent_id`` is one type test, whose plain CPU tensors are reduced by a short function found through the
pickler's ``dispatch_table`` (by exact type, so subclasses and every other object reduce as they always do), and
whose records are written by torch's own zip writer, in ``torch.save``'s order. Anything else (a tensor on another
device, sparse, quantized, nested, with a conjugate or negative bit, Python attributes or backward hooks, of a dtype
torch saves as an untyped storage, a storage saved on its own, torch's ``skip_data`` mode) goes to ``torch.save``.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import sys
from collections import OrderedDict
from typing import Any

import torch

try:  # torch's own pieces of torch.save; without them, torch.save does the work
    from torch.serialization import _get_storage_alignment, _open_zipfile_writer, _serialization_tls

    #: The legacy storage class torch.save names for a tensor of each dtype (torch.storage's map, spelled out: the
    #: classes' own ``dtype`` warns that typed storages are deprecated).
    _STORAGE_CLASSES = {
        torch.float32: torch.FloatStorage, torch.float64: torch.DoubleStorage, torch.float16: torch.HalfStorage,
        torch.bfloat16: torch.BFloat16Storage, torch.int64: torch.LongStorage, torch.int32: torch.IntStorage,
        torch.int16: torch.ShortStorage, torch.int8: torch.CharStorage, torch.uint8: torch.ByteStorage,
        torch.bool: torch.BoolStorage, torch.complex64: torch.ComplexFloatStorage,
        torch.complex128: torch.ComplexDoubleStorage}
    _rebuild_tensor = torch._utils._rebuild_tensor_v2
    #: The bytes of one element of each dtype (a dict lookup costs less than ``Tensor.element_size()``)
    _ITEM_SIZES = {dtype: torch.empty((), dtype=dtype).element_size() for dtype in _STORAGE_CLASSES}
    AVAILABLE = True
except (ImportError, AttributeError):  # pragma: no cover - an older or newer torch
    AVAILABLE = False

#: Objects torch pickles as storages when met on their own (not through a tensor): left to torch.save.
_STORAGE_TYPES = frozenset([torch.UntypedStorage, torch.storage.TypedStorage, *_STORAGE_CLASSES.values(),
                            torch.QInt8Storage, torch.QUInt8Storage, torch.QInt32Storage, torch.QUInt4x2Storage,
                            torch.QUInt2x4Storage] if AVAILABLE else [])


class _Unsupported(Exception):
    """Something this writer leaves to ``torch.save``."""


class _StorageRef:
    """A storage in the pickle stream: pickled as its persistent id, as ``torch.save`` does."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple[Any, ...]) -> None:
        self.pid = pid


def _reduce_ordered_dict(od: OrderedDict) -> tuple[Any, ...]:
    # What OrderedDict.__reduce__ returns, without its call to copyreg._slotnames for every dict
    return OrderedDict, (), (vars(od) or None), None, iter(od.items())


class _Storages:
    """The storages of one save's tensors, keyed as ``torch.save`` keys them, and the reduction of a tensor that
    records its storage. Kept apart from the pickler, whose dispatch table holds :meth:`reduce_tensor`: no cycle
    keeps a checkpoint's objects alive after a save."""

    def __init__(self) -> None:
        #: key -> storage, in the order torch.save writes them
        self.by_key: dict[str, torch.UntypedStorage] = {}
        self._keys: dict[int, str] = {}
        self._dtypes: dict[int, torch.dtype] = {}

    def reduce_tensor(self, t: torch.Tensor, _strided: Any = torch.strided, _ref: Any = _StorageRef) -> tuple[Any, ...]:
        # Each property read costs about 600 instructions, each method call twice that: each is read once.
        # The dtype test leaves out quantized tensors; is_cpu, devices other than the CPU (meta included)
        dtype = t.dtype
        storage_class = _STORAGE_CLASSES.get(dtype)
        if storage_class is None or not t.is_cpu or t.layout is not _strided or t.is_nested or t.is_conj() or \
                t.is_neg() or t.__dict__ or t._backward_hooks:  # torch.save warns of hooks
            raise _Unsupported(f"a tensor of {dtype} on {t.device}")
        storage = t.untyped_storage()
        cdata = storage._cdata
        key = self._keys.get(cdata)
        if key is None:
            key = self._keys[cdata] = str(len(self._keys))
            self.by_key[key] = storage
        ptr = storage.data_ptr()
        # torch.save refuses two dtypes over the same bytes; so does it, for this tensor
        if ptr and self._dtypes.setdefault(ptr, dtype) is not dtype:
            raise _Unsupported("two dtypes over one storage")
        pid = ("storage", storage_class, key, "cpu", storage.nbytes() // _ITEM_SIZES[dtype])
        return _rebuild_tensor, (_ref(pid), t.storage_offset(), tuple(t.size()), t.stride(), t.requires_grad,
                                 OrderedDict())


def _refuse_storage(storage: Any) -> Any:
    raise _Unsupported("a storage on its own")


#: The pickler's own reductions, by exact type: OrderedDict's, and storages met on their own left to torch.save
_REDUCTIONS: dict[type, Any] = {OrderedDict: _reduce_ordered_dict, **dict.fromkeys(_STORAGE_TYPES, _refuse_storage)}


class _Pickler(pickle.Pickler):
    def __init__(self, file: Any, storages: _Storages) -> None:
        super().__init__(file, protocol=2)  # torch.save's default protocol
        table = copyreg.dispatch_table.copy()  # as pickle would use it now (a later copyreg.pickle included)
        table.update(_REDUCTIONS)
        table[torch.Tensor] = storages.reduce_tensor
        self.dispatch_table = table

    # Called for every object pickled (hundreds per checkpoint), so it is one test; a storage on its own meets
    # _refuse_storage in the dispatch table instead.
    def persistent_id(self, obj: Any, _type: Any = type, _ref: Any = _StorageRef) -> Any:
        return obj.pid if _type(obj) is _ref else None


def save(obj: Any, f: Any) -> None:
    """``torch.save(obj, f)`` for a writable binary file object ``f``: the same bytes."""
    if not AVAILABLE or _serialization_tls.skip_data:
        torch.save(obj, f)
        return
    data = io.BytesIO()
    storages = _Storages()
    try:
        _Pickler(data, storages).dump(obj)
    except _Unsupported:
        torch.save(obj, f)  # nothing was written to f yet
        return
    pickled = data.getvalue()
    with _open_zipfile_writer(f) as zip_file:
        zip_file.write_record("data.pkl", pickled, len(pickled))
        zip_file.write_record(".format_version", "1", 1)
        alignment = str(_get_storage_alignment())
        zip_file.write_record(".storage_alignment", alignment, len(alignment))
        zip_file.write_record("byteorder", sys.byteorder, len(sys.byteorder))
        for key, storage in storages.by_key.items():
            zip_file.write_record(f"data/{key}", storage, storage.nbytes())


def to_bytes(obj: Any) -> memoryview:
    """The bytes :func:`save` writes for ``obj``."""
    buffer = io.BytesIO()
    save(obj, buffer)
    return buffer.getbuffer()
