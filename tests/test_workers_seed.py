"""seed_everything(workers=True): data-loader workers seeded distinctly, reproducibly, rank-aware, resumable;
deterministic=True lasts for its run only."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.core.loop.seed import WorkerSeeder, seed_workers
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False, "accelerator": "cpu"}


@pytest.fixture(autouse=True)
def _seed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """seed_everything writes EMBER_/PL_SEED_WORKERS and EMBER_/PL_GLOBAL_SEED; put them back after each test."""
    for prefix in ("EMBER", "PL"):
        monkeypatch.setenv(f"{prefix}_SEED_WORKERS", "0")
        monkeypatch.setenv(f"{prefix}_GLOBAL_SEED", "0")


class Augmented(TensorDataset):
    """Noise from torch, Python and NumPy, drawn in whichever process loads the item."""

    def __init__(self, n: int = 40) -> None:
        super().__init__(*tiny_dataset(n)[:])

    def __getitem__(self, i: int) -> Any:
        x, y = super().__getitem__(i)
        return x + 0.1 * torch.randn_like(x) * float(np.random.rand()) * random.random(), y


class Recorder(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].clone())
        return super().training_step(batch, batch_idx)


def loader(workers: int = 2, **kwargs: Any) -> DataLoader:
    return DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=workers, **kwargs)


def fit(workers: int = 2, seed_workers_: bool = True, epochs: int = 2, plugins: tuple = (),
        ckpt: str | None = None) -> Recorder:
    ember.seed_everything(5, workers=seed_workers_)
    model = Recorder()
    ember.Trainer(max_epochs=epochs, callbacks=list(plugins), **QUIET).fit(model, loader(workers), ckpt_path=ckpt)
    return model


def batches(dl: DataLoader) -> list[torch.Tensor]:
    return [x for x, _ in dl]


def test_workers_are_seeded_reproducibly_and_distinctly() -> None:
    a, b = fit(), fit()
    assert len(a.seen) == 20 and all(torch.equal(x, y) for x, y in zip(a.seen, b.seen, strict=True))
    rows = torch.cat(a.seen)
    assert len({tuple(r.tolist()) for r in rows}) == len(rows)  # no two loads drew the same noise


def test_same_batches_for_any_number_of_workers() -> None:
    one, two = fit(workers=1, epochs=1), fit(workers=2, epochs=1)
    assert all(torch.equal(x, y) for x, y in zip(one.seen, two.seen, strict=True))


def test_ranks_draw_different_numbers() -> None:
    ember.seed_everything(5, workers=True)
    torch.manual_seed(0)
    rank0 = batches(seed_workers(loader(), rank=0))
    torch.manual_seed(0)
    rank1 = batches(seed_workers(loader(), rank=1))
    assert not any(torch.allclose(x, y) for x, y in zip(rank0, rank1, strict=True))


def test_epochs_draw_different_numbers() -> None:
    model = fit(epochs=2)
    first = {tuple(r.tolist()) for r in torch.cat(model.seen[:10])}
    assert not first & {tuple(r.tolist()) for r in torch.cat(model.seen[10:])}


def test_off_without_workers_flag_and_user_init_fn_kept() -> None:
    ember.seed_everything(5, workers=False)
    plain = loader()
    assert seed_workers(plain) is plain
    ember.seed_everything(5, workers=True)
    own = loader(worker_init_fn=lambda worker_id: None)
    assert seed_workers(own) is own
    seeded = seed_workers(plain, rank=3)
    assert isinstance(seeded.worker_init_fn, WorkerSeeder) and seeded.worker_init_fn.rank == 3
    assert plain.worker_init_fn is None  # the user's loader is untouched
    assert seed_workers(loader(workers=0)).worker_init_fn is None


class Crash:
    """Asks for a checkpoint after global batch ``at``, fails at the end of the last epoch. (Failing while a
    worker iterator is mid-epoch would leave it to the garbage collector, whose clean-up of workers blocked on
    a full result queue waits 5 s per worker; a killed job has no such leftovers.)"""

    def __init__(self, path: Path, at: int) -> None:
        self.path, self.at, self.seen = path, at, 0

    def on_train_batch_end(self, trainer: Any) -> None:
        self.seen += 1
        if self.seen == self.at:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer: Any) -> None:
        if trainer.current_epoch == trainer.config.max_epochs - 1:
            raise RuntimeError("crash")


def test_resume_mid_epoch_with_two_workers_is_exact(tmp_path: Path) -> None:
    ref = fit()
    ckpt = tmp_path / "crash.ckpt"
    with pytest.raises(RuntimeError, match="crash"):
        fit(plugins=(Crash(ckpt, 13),))
    resumed = fit(ckpt=str(ckpt))
    assert len(resumed.seen) == 20 - 13
    assert all(torch.equal(x, y) for x, y in zip(resumed.seen, ref.seen[13:], strict=True))
    assert all(torch.equal(p, q) for p, q in zip(resumed.parameters(), ref.parameters(), strict=True))


@pytest.mark.parametrize("fails", [False, True])
def test_deterministic_is_restored_after_the_run(fails: bool) -> None:
    assert not torch.are_deterministic_algorithms_enabled()

    class Boom(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            assert torch.are_deterministic_algorithms_enabled()
            if fails:
                raise ValueError("boom")
            return super().training_step(batch, batch_idx)

    trainer = ember.Trainer(max_epochs=1, deterministic=True, **QUIET)
    if fails:
        with pytest.raises(ValueError, match="boom"):
            trainer.fit(Boom(), DataLoader(tiny_dataset(8), batch_size=4))
    else:
        trainer.fit(Boom(), DataLoader(tiny_dataset(8), batch_size=4))
    assert not torch.are_deterministic_algorithms_enabled()


def test_deterministic_set_before_the_run_stays_set() -> None:
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        ember.Trainer(max_epochs=1, deterministic=True, **QUIET).fit(
            TinyClassifier(), DataLoader(tiny_dataset(8), batch_size=4))
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "reproducibility.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (python block {i + 1})", "exec"), {"__name__": "reproducibility_doc"})


def test_seed_everything_leaves_lightnings_variables_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code written for Lightning reads PL_GLOBAL_SEED / PL_SEED_WORKERS after seed_everything (worker processes,
    LightningCLI's seed_everything=True); a process started with only PL_GLOBAL_SEED takes that seed."""
    assert ember.seed_everything(31, workers=True, verbose=False) == 31
    assert (os.environ["PL_GLOBAL_SEED"], os.environ["PL_SEED_WORKERS"]) == ("31", "1")
    assert (os.environ["EMBER_GLOBAL_SEED"], os.environ["EMBER_SEED_WORKERS"]) == ("31", "1")
    monkeypatch.delenv("EMBER_GLOBAL_SEED")
    monkeypatch.setenv("PL_GLOBAL_SEED", "57")
    assert ember.seed_everything(verbose=False) == 57
    assert os.environ["EMBER_GLOBAL_SEED"] == "57"
