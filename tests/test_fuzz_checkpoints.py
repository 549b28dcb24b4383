"""Fuzzing checkpoint loading: corrupted, truncated and malicious variants of real ember checkpoints.

Every variant must end as a CheckpointError naming the file, or (for a harmless change, e.g. a flipped byte
in an unused padding field) load exactly the original content. None may run code: every malicious payload
would create a marker file, which must never appear. Each test reports how many variants it tried; together
they try well over 500 (see ``test_enough_variants_were_tried``).
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_support import fsdp_available, needs_fsdp

import ember
from ember.plugins._shared import integrity
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.plugins.strategies import sharded_checkpoint
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu",
         "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real single-file checkpoint of a short fit, and the same state as a real sharded checkpoint."""
    root = tmp_path_factory.mktemp("fuzz")
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(root), **QUIET)
    trainer.fit(model, *tiny_loaders(n=32))
    single = root / "single.ckpt"
    trainer.save_checkpoint(single)
    checkpoint = safe_load(str(single))
    work = {"root": root, "single": single, "checkpoint": checkpoint}
    if fsdp_available():  # sharded checkpoints are strategy.fsdp's (torch >= 2.6)
        sharded = root / "sharded"
        sharded_checkpoint.save(checkpoint, sharded, model, trainer.optimizers)
        work.update(sharded=sharded, sharded_loaded=sharded_checkpoint.load(sharded, TinyClassifier()))
    return work


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "code-ran"
    yield path
    assert not path.exists(), "a checkpoint ran code"


def same(a: Any, b: Any) -> bool:
    """Deep equality of checkpoint content, tensors bit for bit."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and \
            a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def outcome(load: Callable[[], Any], expected: Any, names: str) -> str:
    """"error" (a CheckpointError naming ``names``), "same" (loaded the original content), or what went wrong."""
    try:
        loaded = load()
    except ember.CheckpointError as exc:
        return "error" if names in str(exc) else f"an error not naming {names}: {exc}"
    except Exception as exc:  # anything else is a failure: unclear, or a pickle traceback
        return f"{type(exc).__name__}: {exc}"
    return "same" if same(loaded, expected) else "LOADED SILENTLY CORRUPTED CONTENT"


# ---------------------------------------------------------------------------------------------------------
# Payloads: each would create the marker file if anything called it.
# ---------------------------------------------------------------------------------------------------------


def payloads(marker: Path) -> list[Any]:
    m = str(marker)

    class Reduce:
        def __init__(self, fn: Any, args: tuple) -> None:
            self.fn, self.args = fn, args

        def __reduce__(self) -> Any:
            return self.fn, self.args

    return [Reduce(open, (m, "w")), Reduce(os.system, (f"touch {m}",)), Reduce(exec, (f"open({m!r}, 'w')",)),
            Reduce(eval, (f"open({m!r}, 'w')",)), Reduce(subprocess.call, (["touch", m],)),
            Reduce(Path.touch, (Path(m),)), Reduce(shutil.copyfile, (__file__, m))]


def evil_pickles(marker: Path) -> list[bytes]:
    return [pickle.dumps({"format_version": 1, "state_dict": {}, "x": p}, protocol=proto)
            for p in payloads(marker) for proto in range(pickle.HIGHEST_PROTOCOL + 1)]


def with_record(source: Path, target: Path, record: str, data: bytes) -> None:
    """A copy of the zip ``source`` with ``record`` replaced, every CRC correct (as an attacker writes it)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename.endswith(record) else src.read(info))


# ---------------------------------------------------------------------------------------------------------
# Single-file checkpoints
# ---------------------------------------------------------------------------------------------------------


def single_variants(original: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    size = len(original)
    for cut in sorted({0, 1, 3, 4, 22, size - 1, size - 22, *rng.sample(range(size), 60)}):
        yield f"truncated to {cut}", original[:cut]
    for pos in sorted(rng.sample(range(size), 200)):
        data = bytearray(original)
        data[pos] ^= 1 << rng.randrange(8)
        yield f"bit flipped at {pos}", bytes(data)
    for _ in range(30):
        start, length = rng.randrange(size), rng.randrange(1, 512)
        data = bytearray(original)
        data[start:start + length] = bytes(len(data[start:start + length]))
        yield f"zeroed {length} bytes at {start}", bytes(data)
    for n in (1, 100, 4096):
        yield f"{n} bytes appended", original + rng.randbytes(n)
    for n in (4, 1000, size):
        yield f"{n} random bytes", rng.randbytes(n)
        yield f"{n} random bytes after the zip magic", b"PK\x03\x04" + rng.randbytes(n)


def test_corrupted_and_truncated_single_file_checkpoints(work: dict, tmp_path: Path) -> None:
    original = work["single"].read_bytes()
    rng = random.Random(1234)
    failures, outcomes = [], {"error": 0, "same": 0}
    for what, data in single_variants(original, rng):
        path = tmp_path / "variant.ckpt"
        path.write_bytes(data)
        result = outcome(lambda p=path: safe_load(str(p)), work["checkpoint"], str(path))
        if result in outcomes:
            outcomes[result] += 1
        else:
            failures.append(f"{what}: {result}")
    assert sum(outcomes.values()) + len(failures) >= 300  # variants tried
    assert not failures, "\n".join(failures[:10])
    assert outcomes["error"] > 250  # nearly every change is caught; harmless ones (padding) load the original


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on crafted pickles
def test_malicious_single_file_checkpoints_run_nothing(work: dict, tmp_path: Path, marker: Path) -> None:
    failures, count = [], 0
    for i, data in enumerate(evil_pickles(marker)):
        for where in ("zip", "bare"):
            path = tmp_path / f"evil{i}-{where}.ckpt"
            if where == "zip":
                with_record(work["single"], path, "data.pkl", data)
            else:
                path.write_bytes(data)
            result = outcome(lambda p=path: safe_load(str(p)), None, str(path))
            count += 1
            if result != "error":
                failures.append(f"payload {i} ({where}): {result}")
    # the same through the public API
    path = tmp_path / "evil-api.ckpt"
    torch.save({"format_version": 1, "state_dict": {}, "x": payloads(marker)[0]}, path)
    with pytest.raises(ember.CheckpointError, match=r"weights-only load refuses.*io\.open.*Nothing in it was run"):
        TinyClassifier.load_from_checkpoint(path)
    assert count >= 80
    assert not failures, "\n".join(failures[:10])


def test_a_damaged_checkpoint_offers_the_previous_good_one(work: dict, tmp_path: Path) -> None:
    good = tmp_path / "epoch=0.ckpt"
    shutil.copy(work["single"], good)
    os.utime(good, (1, 1))
    data = bytearray(work["single"].read_bytes())
    record = zipfile.ZipFile(work["single"]).infolist()
    tensor = next(r for r in record if "/data/" in r.filename and r.file_size > 64)
    data[tensor.header_offset + 200] ^= 0x01  # inside a weight tensor: torch alone would load it silently
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(bytes(data))
    with pytest.raises(ember.CheckpointError, match=r"last\.ckpt is damaged: the data of one tensor .* CRC-32.*"
                                                    r"newest intact checkpoint next to it is .*epoch=0\.ckpt"):
        TinyClassifier.load_from_checkpoint(bad)


def _flipped(single: Path) -> bytes:
    data = bytearray(single.read_bytes())
    tensor = next(r for r in zipfile.ZipFile(single).infolist() if "/data/" in r.filename and r.file_size > 64)
    data[tensor.header_offset + 200] ^= 0x01
    return bytes(data)


@pytest.mark.parametrize("with_intact", [True, False])
def test_a_folder_of_several_damaged_checkpoints_is_searched_once(work: dict, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  with_intact: bool) -> None:
    """Each sibling is checked once: a damaged sibling's own error does not search the folder again."""
    if with_intact:
        good = tmp_path / "epoch=0.ckpt"
        shutil.copy(work["single"], good)
        os.utime(good, (1, 1))
    whole = work["single"].read_bytes()
    (tmp_path / "epoch=1.ckpt").write_bytes(_flipped(work["single"]))
    (tmp_path / "epoch=2.ckpt").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "epoch=3.ckpt").write_bytes(whole[: len(whole) - 40])
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(_flipped(work["single"]))
    checked: list[str] = []
    intact = integrity._intact

    def counting(path: str) -> bool:
        checked.append(os.path.basename(path))
        if len(checked) > 20:
            raise RuntimeError(f"the sibling search recursed: {checked[:8]} ...")
        return intact(path)

    monkeypatch.setattr(integrity, "_intact", counting)
    offer = r".*newest intact checkpoint next to it is .*epoch=0\.ckpt" if with_intact else r"[^\n]*$"
    with pytest.raises(ember.CheckpointError, match=r"last\.ckpt is damaged" + offer) as caught:
        TinyClassifier.load_from_checkpoint(bad)
    assert with_intact or "newest intact" not in str(caught.value)
    assert len(checked) == len(set(checked)) <= integrity._SIBLINGS_CHECKED


# ---------------------------------------------------------------------------------------------------------
# Sharded checkpoints
# ---------------------------------------------------------------------------------------------------------


def load_sharded(path: Path) -> dict:
    return sharded_checkpoint.load(path, TinyClassifier())
@needs_fsdp
def test_corrupted_and_truncated_sharded_checkpoints(work: dict, tmp_path: Path) -> None:
    rng = random.Random(99)
    failures, outcomes = [], {"error": 0, "same": 0}
    names = sorted(os.listdir(work["sharded"]))
    assert set(names) == {".metadata", "__0_0.distcp", "meta.pt", integrity.MANIFEST}
    variants: list[tuple[str, str, Callable[[bytes], bytes | None]]] = []
    for name in names:
        variants.append((name, "deleted", lambda b: None))
        size = (work["sharded"] / name).stat().st_size
        for cut in rng.sample(range(size), 8):
            variants.append((name, f"truncated to {cut}", lambda b, c=cut: b[:c]))
        for pos in rng.sample(range(size), 30):
            def flip(b: bytes, p: int = pos, bit: int = rng.randrange(8)) -> bytes:
                d = bytearray(b)
                d[p] ^= 1 << bit
                return bytes(d)
            variants.append((name, f"bit flipped at {pos}", flip))
    for name, what, change in variants:
        folder = tmp_path / "variant"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(work["sharded"], folder)
        changed = change((folder / name).read_bytes())
        if changed is None:
            (folder / name).unlink()
        else:
            (folder / name).write_bytes(changed)
        result = outcome(lambda f=folder: load_sharded(f), work["sharded_loaded"], str(folder))
        if result in outcomes:
            outcomes[result] += 1
        else:
            failures.append(f"{name} {what}: {result}")
    assert len(variants) >= 150
    assert not failures, "\n".join(failures[:10])
    assert outcomes["error"] > 100


def _rehash(folder: Path) -> None:
    """Recompute the checksums, as someone crafting a directory would."""
    names = [n for n in os.listdir(folder) if n != integrity.MANIFEST]
    integrity.write_manifest(str(folder), integrity.hash_files(str(folder), names))


@needs_fsdp
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_malicious_sharded_checkpoints_run_nothing(work: dict, tmp_path: Path, marker: Path) -> None:
    failures, count = [], 0
    for i, data in enumerate(evil_pickles(marker)):
        for target in (".metadata", "meta.pt"):
            folder = tmp_path / f"evil{i}{target}"
            shutil.copytree(work["sharded"], folder)
            if target == "meta.pt":
                with_record(work["sharded"] / "meta.pt", folder / "meta.pt", "data.pkl", data)
            else:
                (folder / target).write_bytes(data)
            _rehash(folder)
            for load in (lambda f=folder: load_sharded(f),
                         lambda f=folder: sharded_checkpoint.consolidate(f, f / "out.ckpt")):
                count += 1
                result = outcome(load, None, str(folder))
                if result != "error":
                    failures.append(f"payload {i} in {target}: {result}")
    assert count >= 160
    assert not failures, "\n".join(failures[:10])
@needs_fsdp
def test_a_malicious_value_inside_the_shards_runs_nothing(work: dict, tmp_path: Path, marker: Path) -> None:
    """DCP stores non-tensor values as pickles and its own planner loads them with weights_only=False."""
    import torch.distributed.checkpoint as dcp

    for i, payload in enumerate(payloads(marker)):
        folder = tmp_path / f"evil{i}"
        state = {"state_dict": dict(work["checkpoint"]["state_dict"]),
                 "optimizer_states": [{"state": {}, "param_groups": [{"lr": payload, "params": ["net.0.weight"]}]}]}
        with sharded_checkpoint._quiet_single_process():
            dcp.save(state, checkpoint_id=str(folder))
        shutil.copy(work["sharded"] / "meta.pt", folder / "meta.pt")
        _rehash(folder)
        for load in (lambda f=folder: load_sharded(f),
                     lambda f=folder: sharded_checkpoint.consolidate(f, f / "out.ckpt")):
            with pytest.raises(ember.CheckpointError, match="not plain data a weights-only load can rebuild"):
                load()
@needs_fsdp
def test_metadata_naming_files_outside_the_directory_is_refused(work: dict, tmp_path: Path) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    folder = tmp_path / "escape"
    shutil.copytree(work["sharded"], folder)
    with open(folder / ".metadata", "rb") as f:
        metadata = pickle.load(f)
    index = next(iter(metadata.storage_data))
    info = metadata.storage_data[index]
    metadata.storage_data[index] = _StorageInfo("../../etc/passwd", info.offset, info.length)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    _rehash(folder)
    with pytest.raises(ember.CheckpointError, match=r"names the shard file '../../etc/passwd', which is not a file"):
        load_sharded(folder)
@needs_fsdp
def test_a_sharded_checkpoint_that_lost_its_checksums_is_refused(work: dict, tmp_path: Path) -> None:
    folder = tmp_path / "bare"
    shutil.copytree(work["sharded"], folder)
    (folder / integrity.MANIFEST).unlink()
    with pytest.raises(ember.CheckpointError, match="has lost its checksums.json"):
        load_sharded(folder)
@needs_fsdp
def test_consolidate_reads_a_verified_checkpoint(work: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from ember.cli import main as ember_cli

    out = tmp_path / "whole.ckpt"
    assert ember_cli(["consolidate", str(work["sharded"]), str(out)]) == 0
    whole = safe_load(str(out))
    assert same(whole["state_dict"], work["checkpoint"]["state_dict"])
    assert same(whole["optimizer_states"], work["checkpoint"]["optimizer_states"])
    damaged = tmp_path / "damaged"
    shutil.copytree(work["sharded"], damaged)
    data = bytearray((damaged / "__0_0.distcp").read_bytes())
    data[len(data) // 2] ^= 0x10
    (damaged / "__0_0.distcp").write_bytes(bytes(data))
    assert ember_cli(["consolidate", str(damaged), str(tmp_path / "x.ckpt")]) == 1
    assert "__0_0.distcp is damaged: its content does not match the SHA-256" in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists()

