"""The learning-rate and batch-size finders: what they find, and that the model is put back exactly."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.errors import ConfigurationError
from ember.testing import TinyClassifier, tiny_dataset
from ember.tuner import Tuner

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False, "accelerator": "cpu"}


class Sized(TinyClassifier):
    """Builds its own loader from ``self.batch_size``; 'runs out of memory' above ``capacity`` samples."""

    def __init__(self, batch_size: int = 2, capacity: int = 10**9, lr: float = 0.1) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.capacity = capacity
        self.tried: list[int] = []

    def train_dataloader(self) -> DataLoader:
        return DataLoader(tiny_dataset(256), batch_size=self.batch_size, shuffle=True)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        n = len(batch[0])
        if batch_idx == 0:
            self.tried.append(n)
        if n > self.capacity:
            # what the CPU allocator raises when an activation does not fit; a real failure is not safe to
            # provoke on a shared machine
            raise torch.OutOfMemoryError(f"DefaultCPUAllocator: can't allocate memory for batch {n}")
        return super().training_step(batch, batch_idx)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_lr_find_records_suggests_plots_and_restores(tmp_path: Path) -> None:
    ember.seed_everything(0)
    model = Sized(batch_size=16)
    before = snapshot(model)
    rng_before = torch.get_rng_state()
    trainer = ember.Trainer(max_epochs=3, **QUIET)
    finder = Tuner(trainer).lr_find(model, min_lr=1e-4, max_lr=10.0, num_training=40)
    lrs, losses = finder.results["lr"], finder.results["loss"]
    assert lrs[0] == pytest.approx(1e-4) and lrs == sorted(lrs) and len(lrs) == len(losses) >= 20
    assert all(a < b for a, b in zip(lrs, lrs[1:], strict=False))
    suggestion = finder.suggestion()
    assert suggestion is not None and 1e-4 < suggestion < 10.0
    assert model.lr == suggestion == model.hparams.lr  # update_attr
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # weights bitwise equal
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert trainer.global_step == 0  # the user's trainer did not train
    finder.plot(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lr_find_stops_when_the_loss_diverges() -> None:
    ember.seed_everything(0)
    finder = Tuner(ember.Trainer(**QUIET)).lr_find(Sized(batch_size=16), min_lr=1e-3, max_lr=1e4, num_training=100,
                                                   update_attr=False)
    assert len(finder.results["lr"]) < 100


def test_a_fit_after_tuning_equals_a_fit_without(tmp_path: Path) -> None:
    """Model, optimizer and random state are restored exactly: the tuned-then-trained model is the same."""

    def train(tune: bool) -> dict[str, torch.Tensor]:
        ember.seed_everything(1)
        random.seed(1)
        model = Sized(batch_size=8)
        trainer = ember.Trainer(max_epochs=1, **QUIET)
        if tune:
            Tuner(trainer).lr_find(model, num_training=10, update_attr=False)
            Tuner(trainer).scale_batch_size(model, max_trials=2)
            model.batch_size = 8
        trainer.fit(model)
        return snapshot(model)

    plain, tuned = train(False), train(True)
    assert all(torch.equal(plain[k], tuned[k]) for k in plain)


@pytest.mark.slow
def test_scale_batch_size() -> None:
    """Bisects after the first failure, returns the largest size that fitted less 5%, restores the weights.
    (More cases, and the same sizes as Lightning's finder: test_scale_batch_size_matches_lightning.)"""
    model = Sized(capacity=40)
    before = snapshot(model)
    found = Tuner(ember.Trainer(**QUIET)).scale_batch_size(model, mode="binsearch", steps_per_trial=1)
    assert found == 38 == model.batch_size == model.hparams.batch_size
    assert model.tried == [2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_scale_batch_size_matches_lightning() -> None:
    """The sizes tried and the size returned equal Lightning's own finder's on the same failing model (recorded by
    tests/lightning/record_batch_size.py)."""
    import json

    recorded = json.loads((Path(__file__).parent / "lightning" / "batch_size.json").read_text())
    for case in recorded["cases"]:
        model = Sized(capacity=case["capacity"])
        found = Tuner(ember.Trainer(**QUIET)).scale_batch_size(model, mode=case["mode"], steps_per_trial=1)
        assert (found, model.tried) == (case["found"], case["tried"]), case


def test_scale_batch_size_stops_at_max_val() -> None:
    model = Sized()
    assert Tuner(ember.Trainer(**QUIET)).scale_batch_size(model, steps_per_trial=1, max_val=20) == 20
    assert model.tried == [2, 4, 8, 16, 20]


def test_errors_say_what_to_do() -> None:
    tuner = Tuner(ember.Trainer(**QUIET))
    with pytest.raises(ConfigurationError, match="train_dataloader"):
        tuner.scale_batch_size(Sized(), train_dataloaders=DataLoader(tiny_dataset(8)))
    with pytest.raises(ConfigurationError, match="batch_arg_name"):
        tuner.scale_batch_size(TinyClassifier())
    with pytest.raises(ConfigurationError, match="'exponential' or 'linear'"):
        tuner.lr_find(Sized(), mode="exp")

    class NoLr(torch.nn.Module):
        pass

    with pytest.raises(ConfigurationError, match="update_attr=False"):
        tuner.lr_find(NoLr())
    with pytest.raises(ConfigurationError, match="even batch_size=2"):
        tuner.scale_batch_size(Sized(capacity=1))


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "tuning.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (python block {i + 1})", "exec"), {"__name__": "tuning_doc"})
    assert (tmp_path / "lr_find.png").exists()


MODULE = '''
import torch
from torch.utils.data import DataLoader
from ember.testing import TinyClassifier, tiny_dataset


class Net(TinyClassifier):
    def __init__(self, lr: float = 0.1, batch_size: int = 4) -> None:
        super().__init__(lr=lr)
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(tiny_dataset(64), batch_size=self.batch_size)
'''


@pytest.mark.slow
def test_ember_tune_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from ember.cli import main

    (tmp_path / "tunable.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["tune", "--lr-find", "--num-training", "20", "--batch-size", "power", "--plot", "lr.png",
                 "--model", "tunable:Net", "--trainer.accelerator", "cpu", "--trainer.logger", "false",
                 "--trainer.enable_progress_bar", "false", "--seed_everything", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "batch_size: 64" in out  # one batch holds all 64 samples: the search stops there
    lr = float(re.search(r"^lr: (\S+)$", out, flags=re.M).group(1))
    assert 1e-8 < lr < 1.0
    assert (tmp_path / "lr.png").read_bytes()[:4] == b"\x89PNG"


def test_lr_find_matches_lightning() -> None:
    """Against Lightning's own lr_find on the same model and data (recorded by tests/lightning/record_lr_find.py):
    the same learning rate at every step, the same losses, the same suggestion. One departure: the smoothed loss's
    bias correction is the textbook ``1 - beta**(t + 1)`` where Lightning divides by ``1 - beta**(t + 2)``
    (it counts the step already taken), so the smoothed values differ in the first steps, not the raw ones."""
    import json

    recorded = json.loads((Path(__file__).parent / "lightning" / "lr_find.json").read_text())
    settings = recorded["settings"]

    class Same(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    finder = Tuner(ember.Trainer(**QUIET)).lr_find(
        Same(), DataLoader(tiny_dataset(256), batch_size=settings["batch_size"]), min_lr=settings["min_lr"],
        max_lr=settings["max_lr"], num_training=settings["num_training"],
        early_stop_threshold=settings["early_stop_threshold"], update_attr=False)
    ours, theirs = finder.results, recorded
    beta = 0.98  # both smooth with 0.98; Lightning's bias correction divides by 1 - beta**(t + 2), ours by
    # 1 - beta**(t + 1) (the textbook form), so compare the raw losses the two curves were made of
    assert raw(ours["loss"], beta, 1) == pytest.approx(raw(theirs["loss"], beta, 2), rel=1e-4)
    assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-12)
    assert finder.suggestion() == pytest.approx(theirs["suggestion"], rel=1e-12)


def raw(smoothed: list[float], beta: float, offset: int) -> list[float]:
    """Undo exponential smoothing with bias correction ``1 - beta**(t + offset)``."""
    out, avg = [], 0.0
    for t, value in enumerate(smoothed):
        new = value * (1 - beta ** (t + offset))
        out.append((new - beta * avg) / (1 - beta))
        avg = new
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA every trial frees the device's memory")
def test_on_the_cpu_only_failed_trials_collect_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full garbage collection costs about a second in a large process: the search runs one after each
    out-of-memory trial (to free what the failed batch held), not after each trial that fitted; and the failure
    does not walk every live object looking for dead DataLoader workers (that is for a loader's worker errors)."""
    import gc

    calls = {"collect": 0, "get_objects": 0}
    collect, get_objects = gc.collect, gc.get_objects

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any) -> Any:
            calls[name] += 1
            return real(*args)
        return call

    monkeypatch.setattr(gc, "collect", counted("collect", collect))
    monkeypatch.setattr(gc, "get_objects", counted("get_objects", get_objects))
    model = Sized(capacity=40)
    assert Tuner(ember.Trainer(**QUIET)).scale_batch_size(model, mode="power", steps_per_trial=1) == 32
    assert model.tried == [2, 4, 8, 16, 32, 64]
    assert calls == {"collect": 1, "get_objects": 0}
