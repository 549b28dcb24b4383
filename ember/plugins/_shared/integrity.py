"""Content checksums of checkpoint files, verified before anything in them is used.

* A single-file checkpoint is a zip archive written by ``torch.save``, which stores a CRC-32 of every record
  (the pickled structure and each tensor's bytes). :func:`verify_zip` recomputes them all in one streaming
  pass (about 4 GB/s on one core) and refuses the file at the first mismatch, so a flipped byte in a weight
  never loads silently.
* A sharded checkpoint directory carries ``checksums.json``: the SHA-256 and size of every file in it (each
  rank hashes the shards it wrote). :func:`verify_manifest` checks them on load.

Every refusal is a :class:`ember.CheckpointError` naming the file, and offers the newest intact checkpoint
next to it (:func:`offer_sibling`), e.g. ``last.ckpt`` when ``epoch=3.ckpt`` is damaged.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterable, Sequence

from ember.core.errors import CheckpointError

MANIFEST = "checksums.json"
_CHUNK = 1 << 20
_DOS_DIRECTORY = 0x10
#: Encrypted, patched data, strong encryption: never written by torch.
_UNSUPPORTED_FLAGS = 0x1 | 0x20 | 0x40
#: How many neighbouring checkpoints are checked when looking for an intact one to offer.
_SIBLINGS_CHECKED = 4
#: True while :func:`offer_sibling` checks candidates: a damaged candidate's own error offers nothing, so the
#: search checks each file once and never recurses into its siblings' siblings.
_SEARCHING: contextvars.ContextVar[bool] = contextvars.ContextVar("ember_sibling_search", default=False)


def verify_zip(path: str) -> None:
    """Raise a CheckpointError naming ``path`` unless every record of the zip archive matches its CRC-32."""
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            if records and all(r.CRC == 0 for r in records if r.file_size):
                return  # written with torch.serialization.set_crc32_options(False): nothing to compare with
            for record in records:
                _check_record(archive, record, path)
    except CheckpointError:
        raise
    except Exception as exc:  # whatever a damaged archive makes zipfile raise: one clear error
        raise CheckpointError(f"{path} is damaged: its archive structure cannot be read ({exc})."
                              f"{offer_sibling(path)}") from None


def _check_record(archive: zipfile.ZipFile, record: zipfile.ZipInfo, path: str) -> None:
    if record.is_dir() or record.external_attr & _DOS_DIRECTORY or record.flag_bits & _UNSUPPORTED_FLAGS:
        # torch's zip reader treats such a record as a folder or refuses it: reading it yields no data
        raise CheckpointError(f"{path} is damaged: the directory entry of its record {record.filename!r} is "
                              f"malformed (attributes {record.external_attr:#x}, flags {record.flag_bits:#x})."
                              f"{offer_sibling(path)}")
    if record.compress_type != zipfile.ZIP_STORED:
        raise CheckpointError(f"{path} is not a torch checkpoint as torch writes it: its record {record.filename!r} "
                              "is compressed (torch stores records uncompressed). Save it again with torch.save.")
    crc = 0
    size = 0
    try:
        with archive.open(record) as stream:
            while chunk := stream.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
    except zipfile.BadZipFile as exc:
        if "CRC" not in str(exc):
            raise
    if size != record.file_size or crc != record.CRC:
        what = "the pickled structure" if record.filename.endswith("data.pkl") else \
            f"the data of one tensor (record {record.filename!r})" if "/data/" in record.filename else \
            f"the record {record.filename!r}"
        raise CheckpointError(f"{path} is damaged: {what} does not match the CRC-32 checksum stored with "
                              f"it. The file was damaged after it was written "
                              f"(disk, copy or transfer); nothing was loaded.{offer_sibling(path)}")


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(folder: str, names: Iterable[str]) -> dict[str, dict[str, int | str]]:
    """``{name: {"size": bytes, "sha256": hex}}`` for files of ``folder``."""
    return {name: {"size": os.path.getsize(os.path.join(folder, name)),
                   "sha256": file_sha256(os.path.join(folder, name))} for name in names}


def write_manifest(folder: str, files: dict[str, dict[str, int | str]]) -> None:
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as f:
        json.dump({"algorithm": "sha256", "files": dict(sorted(files.items()))}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def read_manifest(folder: str) -> dict[str, dict[str, int | str]] | None:
    """The manifest of a sharded checkpoint (None when it has none), checked for shape."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        files = data["files"]
        if data.get("algorithm") != "sha256" or not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("size"), int)
                and isinstance(v.get("sha256"), str) for k, v in files.items()):
            raise ValueError("unexpected layout")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path} is damaged: it is not the checksum list ember writes ({exc})."
                              f"{offer_sibling(folder)}") from None
    return files


def verify_manifest(folder: str, files: dict[str, dict[str, int | str]], names: Sequence[str]) -> str:
    """Check the files ``names`` of ``folder`` against ``files``; returns an error message, or "" when intact."""
    for name in names:
        expected = files[name]
        full = os.path.join(folder, name)
        if not os.path.isfile(full):
            return f"the sharded checkpoint {folder} is incomplete: {name} is missing.{offer_sibling(folder)}"
        size = os.path.getsize(full)
        if size != expected["size"]:
            return (f"{full} is truncated or damaged: {size} bytes, {expected['size']} when written."
                    f"{offer_sibling(folder)}")
        if file_sha256(full) != expected["sha256"]:
            return (f"{full} is damaged: its content does not match the SHA-256 recorded in {MANIFEST} when it "
                    f"was written; nothing was loaded.{offer_sibling(folder)}")
    return ""


def _intact(path: str) -> bool:
    try:
        if os.path.isdir(path):
            files = read_manifest(path)
            return files is not None and not verify_manifest(path, files, sorted(files))
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return False
        verify_zip(path)
        return True
    except (CheckpointError, OSError):
        return False


def offer_sibling(path: str) -> str:
    """A sentence offering the newest intact checkpoint next to ``path`` (same folder, same kind), or "".

    Checks at most ``_SIBLINGS_CHECKED`` files, each once: called while a search is under way (the error of a
    damaged candidate), it answers "" at once.
    """
    if _SEARCHING.get():
        return ""
    path = os.path.abspath(path.rstrip(os.sep))
    folder, name = os.path.split(path)
    suffix = "" if os.path.isdir(path) else os.path.splitext(name)[1]
    try:
        entries = [os.path.join(folder, e) for e in os.listdir(folder) if not e.startswith(".")]
    except OSError:
        return ""
    candidates = [e for e in entries if e != path and (os.path.isdir(e) if not suffix else
                                                        os.path.isfile(e) and e.endswith(suffix))]
    candidates.sort(key=_mtime, reverse=True)
    token = _SEARCHING.set(True)
    try:
        intact = next((c for c in candidates[:_SIBLINGS_CHECKED] if _intact(c)), None)
    finally:
        _SEARCHING.reset(token)
    if intact is None:
        return ""
    return f" The newest intact checkpoint next to it is {intact}: resume from it with ckpt_path={intact!r}."


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0
