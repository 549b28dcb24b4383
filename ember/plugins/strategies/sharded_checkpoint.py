"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP), and consolidating them into one file.

A sharded checkpoint is a directory:

* the DCP files (``.metadata`` and one ``*.distcp`` file per rank) hold ``state_dict`` (the module's sharded
  tensors) and ``optimizer_states`` (one state per optimizer, keyed by parameter name, sharded alike); every
  rank writes its own shards, so nothing is gathered;
* ``meta.pt`` (written by global rank 0) holds the rest of the checkpoint dict: loop progress, random states,
  hyperparameters, callback and plugin states. Gradients a checkpoint carries (written in the middle of an
  accumulation window) go with the DCP files, sharded, as ``grads`` keyed by parameter name.

* ``checksums.json``: the SHA-256 and size of every other file (each rank hashes the shards it wrote),
  verified on load; nothing in the directory is unpickled except through weights-only loads and a
  restricted unpickler for ``.metadata`` (:mod:`ember.plugins._shared.dcp_reader`).

It is written to a temporary sibling directory and renamed into place once every rank has finished, so a
crash during a save leaves the previous checkpoint at ``path`` (or, if the crash falls between the two
renames, at ``path + ".old"``, which :func:`load` falls back to).

:func:`consolidate` turns the directory into a single ``torch.save`` file in the layout a one-process run
writes (full tensors, optimizer states keyed by position), which any ember run can resume from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ember.core.errors import CheckpointError
from ember.plugins._shared import integrity
from ember.plugins._shared.checkpoint_files import _disk_full_cause, disk_full_error, is_sharded_directory, safe_load

log = logging.getLogger("ember")

META = "meta.pt"
_SHARDED_KEYS = ("state_dict", "optimizer_states", "grads")
_PARAM_NAMES = "sharded_param_names"
_CHECKSUMS = "sharded_checksums"
_TAKEN = "sharded_taken"  # marks a checkpoint whose shards take_shards took (never written)


def is_sharded(path: str | os.PathLike) -> bool:
    """True when ``path`` is a sharded checkpoint directory."""
    return is_sharded_directory(path)


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


# Collectives of a save: on the default group on the training thread, on the strategy's checkpoint group on the
# writer thread (a collective there must not interleave with the training thread's own on the same group).
def _broadcast(value: Any, group: Any = None) -> Any:
    """Rank 0's ``value`` on every rank (a string or a flag)."""
    dist = _dist()
    if dist is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def _barrier(group: Any = None) -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier(group=group)


def _gather(value: Any, group: Any = None) -> list[Any]:
    dist = _dist()
    if dist is None:
        return [value]
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


def _write_checksums(folder: str, rank: int, group: Any = None) -> None:
    """Every rank hashes the shard files it wrote (DCP names them ``__<rank>_<n>.distcp``); global rank 0 hashes
    the rest and writes the manifest. A collective; ends with a barrier."""
    _barrier(group)  # every rank's files and meta.pt are complete
    mine = sorted(n for n in os.listdir(folder) if n.startswith(f"__{rank}_") and rank != 0)
    gathered = _gather(integrity.hash_files(folder, mine), group)
    if rank == 0:
        files = {name: entry for part in gathered for name, entry in part.items()}
        rest = sorted(n for n in os.listdir(folder) if n not in files and n != integrity.MANIFEST)
        files.update(integrity.hash_files(folder, rest))
        integrity.write_manifest(folder, files)
    _barrier(group)


@contextlib.contextmanager
def _quiet_single_process() -> Any:
    """DCP warns that it assumes one process when no process group exists: that is what ember means then."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def take_shards(checkpoint: dict, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer],
                stage: bool = False) -> dict:
    """``checkpoint`` with the entries DCP writes taken from ``module`` and ``optimizers``: this process's shards
    of the module and optimizer states keyed by name (and of the gradients, for a checkpoint that carries
    them). ``stage``: every tensor copied to host memory (:func:`ember.core.checkpointing.async_writer.snapshot`), so that the
    result belongs to this moment and is written while training goes on. Taken already: returned as it is."""
    if checkpoint.get(_TAKEN):
        return checkpoint
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    sharded: dict[str, Any] = {"state_dict": get_model_state_dict(module),
                               "optimizer_states": [get_optimizer_state_dict(module, opt) for opt in optimizers]}
    rest = {k: v for k, v in checkpoint.items() if k not in _SHARDED_KEYS}
    if checkpoint.get("grads") is not None:  # gradients carried by a checkpoint written mid-window: sharded too
        sharded["grads"] = {name: p.grad for name, p in module.named_parameters() if p.grad is not None}
        rest[_PARAM_NAMES] = [name for name, _ in module.named_parameters()]  # to turn them back into a list
    taken = {**rest, **sharded, _TAKEN: True}
    if stage:
        from ember.core.checkpointing.async_writer import SnapshotBuffers, snapshot

        return snapshot(taken, SnapshotBuffers())  # a DTensor's copy is its local shard's, placement kept
    return taken


def save(checkpoint: dict, path: str | os.PathLike, module: torch.nn.Module,
         optimizers: Sequence[torch.optim.Optimizer], group: Any = None) -> None:
    """Write ``checkpoint`` as a sharded checkpoint at ``path``; a collective (call it on every rank).

    The module and optimizer states are taken from ``module``/``optimizers`` (sharded, keyed by name) unless
    :func:`take_shards` took them already, the other entries of ``checkpoint`` from global rank 0. ``group``:
    the process group of the save's collectives (default: the default group).
    """
    import torch.distributed.checkpoint as dcp

    path = os.fspath(path)
    if os.path.isdir(path) and not is_sharded(path):
        raise CheckpointError(f"cannot write the sharded checkpoint {path}: a directory of that name is in the way, "
                              "and it is not a checkpoint (no .metadata file in it). Move or remove it, or write "
                              "checkpoints elsewhere (ModelCheckpoint(dirpath=...) or Trainer(default_root_dir=...)).")
    dist = _dist()
    rank = dist.get_rank() if dist is not None else 0
    taken = take_shards(checkpoint, module, optimizers)
    sharded = {k: taken[k] for k in _SHARDED_KEYS if k in taken}
    tmp = _broadcast(f"{path}.tmp-{uuid.uuid4().hex[:8]}", group)
    try:
        with _quiet_single_process():
            dcp.save(sharded, checkpoint_id=tmp, process_group=group)
        if rank == 0:
            rest = {k: v for k, v in taken.items() if k not in _SHARDED_KEYS and k != _TAKEN}
            rest[_CHECKSUMS] = integrity.MANIFEST  # a directory without it is then refused, not read unverified
            with open(os.path.join(tmp, META), "wb") as f:
                torch.save(rest, f)
                f.flush()
                os.fsync(f.fileno())
    except BaseException as exc:  # DCP's CheckpointException is a BaseException; the previous checkpoint stays
        shutil.rmtree(tmp, ignore_errors=True)
        full = _disk_full_cause(exc)
        if full is not None:
            raise disk_full_error(path, sharded, full) from None
        raise
    _write_checksums(tmp, rank, group)
    if rank == 0:
        old = path + ".old"
        if os.path.exists(path):  # a previous sharded checkpoint, or a single file (e.g. an earlier run's last.ckpt)
            _delete(old)
            os.replace(path, old)
        os.replace(tmp, path)
        _delete(old)
    _barrier(group)


def _delete(path: str) -> None:
    """Remove a file or a directory tree at ``path``, if any."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def remove(path: str | os.PathLike, rank: int, group: Any = None) -> bool:
    """Delete the sharded checkpoint at ``path``: global rank 0 looks and deletes, every rank waits for it; False
    (nothing done) where rank 0 finds none there. A collective. Every rank takes rank 0's answer: a rank that
    looked for itself could find the folder already deleted, skip the barrier, and start the next collective
    while rank 0 waits in this one."""
    if not _broadcast(rank == 0 and is_sharded(path), group):
        return False
    if rank == 0:
        shutil.rmtree(path)
    _barrier(group)
    return True


def _resolve(path: str) -> str:
    if is_sharded(path):
        return path
    if is_sharded(path + ".old"):
        return path + ".old"
    raise CheckpointError(f"{path!r} is not a sharded checkpoint directory (no DCP .metadata file in it). Pass the "
                          f"directory a sharded save wrote, or a single-file checkpoint.{integrity.offer_sibling(path)}")


def load(path: str | os.PathLike, module: torch.nn.Module, weights_only: bool = True) -> dict:
    """Read a sharded checkpoint for ``module`` (sharded as when it was saved); a collective.

    Each rank reads only its shards. Returns the checkpoint dict as a one-process run's, except that tensors
    are sharded like ``module``'s parameters: ``state_dict`` for ``module.load_state_dict`` and
    ``optimizer_states`` keyed by position for ``Optimizer.load_state_dict``. The optimizers need not exist
    yet: the shapes to read come from the checkpoint's own metadata.

    Nothing in the directory runs code, whatever ``weights_only`` says (see :func:`open_verified`).
    """
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    path, checkpoint, metadata = open_verified(path)
    like = module.state_dict()
    template: dict[str, Any] = {}
    for key, meta in metadata.state_dict_metadata.items():
        where: tuple[Any, ...] = _where(metadata, key)
        value: Any = None  # a non-tensor value: DCP puts the saved object here
        if isinstance(meta, TensorStorageMetadata):
            # ("state_dict", fqn), ("grads", fqn) or ("optimizer_states", i, "state", fqn, name): its parameter
            fqn = where[-1] if where[0] in ("state_dict", "grads") else where[3] if len(where) == 5 else None
            param = like.get(fqn) if isinstance(fqn, str) else None
            if where[0] == "state_dict" and param is not None:
                value = param  # read straight into the module's own shards
            elif param is not None and tuple(param.shape) == tuple(meta.size):
                value = torch.empty_like(param, dtype=meta.properties.dtype)  # an optimizer state, sharded alike
            else:
                value = torch.empty(meta.size, dtype=meta.properties.dtype)  # e.g. Adam's step: one value
        _set(template, where, value)
    _dcp_load(template, path, "into this model")
    checkpoint.pop(_PARAM_NAMES, None)
    checkpoint["state_dict"] = template.get("state_dict", {})
    checkpoint["optimizer_states"] = [optimizer_state_by_position(s) for s in template.get("optimizer_states", [])]
    if "grads" in template:
        checkpoint["grads"] = [template["grads"].get(name) for name, _ in module.named_parameters()]
    return checkpoint


def _dcp_load(state: dict, path: str, what: str, **kwargs: Any) -> None:
    """``dcp.load`` through the safe reader and planner, every failure a CheckpointError naming ``path``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from ember.plugins._shared.dcp_reader import SafeLoadPlanner, SafeReader

    planner = SafeLoadPlanner()
    planner.source = path
    try:
        with _quiet_single_process():
            dcp.load(state, storage_reader=SafeReader(path), planner=planner, **kwargs)
    except CheckpointException as exc:  # DCP's wrapper of every rank's failure (a BaseException)
        causes = [cause for cause, _ in exc.failures.values()]
        mine = [c for c in causes if isinstance(c, CheckpointError)]
        if mine:
            raise mine[0] from None
        first = causes[0] if causes else exc
        raise CheckpointError(f"cannot load the sharded checkpoint {path!r}{' ' + what if what else ''}: "
                              f"{type(first).__name__}: {str(first)[:300]}") from None
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"cannot load the sharded checkpoint {path!r}{' ' + what if what else ''}: "
                              f"{type(exc).__name__}: {str(exc)[:300]}") from None


def _where(metadata: Any, key: str) -> tuple[Any, ...]:
    where = (metadata.planner_data or {}).get(key) or (key,)
    if not isinstance(where, (tuple, list)) or not where or not all(
            isinstance(k, str) or isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 1 << 16 for k in where):
        raise CheckpointError(f"the sharded checkpoint's metadata places {key!r} at {where!r}, which is not a valid "
                              "place in a checkpoint: the .metadata file is damaged.")
    return tuple(where)


def open_verified(path: str | os.PathLike, collective: bool = True) -> tuple[str, dict, Any]:
    """Resolve ``path``, check every file against the directory's checksums (with ``collective``, under a
    process group, each rank checks a share: call it on every rank), and read ``meta.pt`` (``weights_only=True``)
    and ``.metadata`` (restricted unpickler). Returns (directory, the meta.pt dict, DCP metadata); a
    CheckpointError naming the file otherwise."""
    from ember.plugins._shared.dcp_reader import read_metadata, shard_files

    path = _resolve(os.fspath(path))
    files = integrity.read_manifest(path)
    dist = _dist() if collective else None
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist is not None else (0, 1)
    if files is not None:
        small = [n for n in (".metadata", META) if n in files]
        missing = [n for n in (".metadata", META) if n not in files]
        error = f"{path}/{integrity.MANIFEST} does not list {missing[0]}: it is damaged." if missing else \
            integrity.verify_manifest(path, files, small)
        if error:
            raise CheckpointError(error)
    checkpoint = _read_meta(path)
    if files is None and checkpoint.get(_CHECKSUMS):
        raise CheckpointError(f"the sharded checkpoint {path} has lost its {integrity.MANIFEST} (the checksums of "
                              f"its files), so its content cannot be verified.{integrity.offer_sibling(path)}")
    if files is None:
        log.warning("%s was written without checksums (an older ember): its content is not verified", path)
    checkpoint.pop(_CHECKSUMS, None)
    metadata = read_metadata(path)
    if files is not None:
        shards = shard_files(metadata)
        unlisted = [n for n in shards if n not in files]
        error = f"{path}/.metadata reads {unlisted[0]}, which {integrity.MANIFEST} does not list: the " \
            "checkpoint is damaged." if unlisted else integrity.verify_manifest(path, files, shards[rank::world])
        errors = [e for e in (_gather(error) if dist is not None else [error]) if e]
        if errors:
            raise CheckpointError(errors[0])
    return path, checkpoint, metadata


def _set(root: dict, where: Sequence[Any], value: Any) -> None:
    """Put ``value`` at the path ``where`` (dict keys and list positions), creating containers on the way."""
    node: Any = root
    for i, key in enumerate(where):
        last = i == len(where) - 1
        nxt: Any = value if last else ([] if isinstance(where[i + 1], int) else {})
        if isinstance(key, int):
            while len(node) <= key:
                node.append(None)
            if last or node[key] is None:
                node[key] = nxt
        elif last or key not in node:
            node[key] = nxt
        node = node[key]


def _is_dtensor(t: Any) -> bool:
    return hasattr(t, "device_mesh") and hasattr(t, "placements")


def shard_like(value: torch.Tensor, like: Any) -> Any:
    """A whole tensor (from a one-process checkpoint) as a DTensor sharded like ``like``; a collective.
    Anything that is not a whole tensor for a DTensor ``like`` is returned as it is."""
    from torch.distributed.tensor import distribute_tensor

    if not _is_dtensor(like) or _is_dtensor(value) or not isinstance(value, torch.Tensor) or \
            tuple(value.shape) != tuple(like.shape):
        return value
    local = like.to_local()
    return distribute_tensor(value.to(device=local.device, dtype=like.dtype), like.device_mesh, like.placements)


def shard_module_state(state: dict, module: torch.nn.Module) -> dict:
    """``state`` (e.g. a consolidated checkpoint's ``state_dict``) with whole tensors sharded like ``module``'s."""
    like = module.state_dict()
    return {k: shard_like(v, like[k]) if k in like else v for k, v in state.items()}


def shard_optimizer_states(optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """Shard, in place, optimizer states that were loaded whole for sharded parameters."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                state = optimizer.state.get(param)
                if state and _is_dtensor(param):
                    for key, value in list(state.items()):
                        state[key] = shard_like(value, param)


def _read_meta(path: str) -> dict:
    """``meta.pt``: always ``weights_only=True`` (with its checksums verified); ember writes only plain data there."""
    meta = os.path.join(path, META)
    if not os.path.isfile(meta):
        raise CheckpointError(f"the sharded checkpoint {path!r} has no {META}: it is incomplete (a crashed save?)."
                              f"{integrity.offer_sibling(path)}")
    checkpoint = safe_load(meta, weights_only=True)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{meta} is damaged: it holds a {type(checkpoint).__name__}, not a dict.")
    return checkpoint


def optimizer_state_by_position(state: dict) -> dict:
    """An optimizer state keyed by parameter name (DCP's form) in ``torch.optim.Optimizer.state_dict()``'s form:
    parameters numbered in the order the parameter groups list them."""
    index: dict[str, int] = {}
    groups = []
    for group in state.get("param_groups", []):
        ids = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in state.get("state", {}).items() if name in index},
            "param_groups": groups}


def consolidate(path: str | os.PathLike, output: str | os.PathLike) -> str:
    """Write the sharded checkpoint at ``path`` as one ``torch.save`` file at ``output`` (atomically), in the
    layout a one-process run writes. Runs in one process, without a process group; needs memory for the
    whole model and optimizer state. Every input file is verified against its checksum and read without
    running code from it (as :func:`load`). Returns ``output``."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from ember.plugins._shared.checkpoint_files import atomic_save

    path, checkpoint, metadata = open_verified(path, collective=False)
    output = os.fspath(output)
    tensors: dict[str, Any] = {}
    for key, meta in metadata.state_dict_metadata.items():
        value = torch.empty(meta.size, dtype=meta.properties.dtype) \
            if isinstance(meta, TensorStorageMetadata) else None
        _set(tensors, _where(metadata, key), value)
    _dcp_load(tensors, path, "", no_dist=True)
    checkpoint["state_dict"] = tensors.get("state_dict", {})
    if "optimizer_states" in tensors:
        checkpoint["optimizer_states"] = [optimizer_state_by_position(s) for s in tensors["optimizer_states"]]
    names = checkpoint.pop(_PARAM_NAMES, None)
    if "grads" in tensors and names is not None:
        checkpoint["grads"] = [tensors["grads"].get(name) for name in names]
    atomic_save(checkpoint, output)
    return output
