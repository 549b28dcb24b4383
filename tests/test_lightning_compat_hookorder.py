"""The hooks of a resumed fit and of ``load_from_checkpoint``, compared with Lightning itself
(tests/lightning/hook_order_resume.json, recorded by tests/lightning/record_hook_order_resume.py): the module's
``on_load_checkpoint`` before its weights are loaded (so that it may rename them), the callbacks' hook and state
after them and before ``configure_optimizers``; a fit resumed from one that ``max_steps`` ended mid-epoch. Then
the same on ember's own API, and the exactness of the resume after ``max_steps``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset
from tests.lightning.recorded import on_ember as run_on_ember
from tests.lightning.recorded import recorded

RECORDED = recorded("hook_order_resume.json")
QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False}


@pytest.fixture(scope="module")
def on_ember() -> dict:
    return run_on_ember("record_hook_order_resume")


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_same_as_lightning(on_ember: dict, case: str) -> None:
    assert on_ember[case] == RECORDED[case]


# -- on ember's own API ----------------------------------------------------------------------------------------
class Renamed(TinyClassifier):
    """The layers of TinyClassifier under another name; old checkpoints are converted in on_load_checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.body = self.net
        del self.net
        self.loads: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.loads.append("module")
        state = checkpoint["state_dict"]
        for key in [k for k in state if k.startswith("net.")]:
            state["body." + key[len("net."):]] = state.pop(key)


class Seen:
    """A plugin that notes what ``on_load_checkpoint`` finds, once per call."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    @ember.hookimpl
    def on_load_checkpoint(self, module: Any, checkpoint: dict) -> None:
        weight = checkpoint["state_dict"]["body.0.weight"]
        self.calls.append(torch.equal(module.body[0].weight.detach(), weight))


def _saved(tmp_path: Path) -> tuple[Path, dict]:
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_checkpointing=False, **QUIET)
    train, val = DataLoader(tiny_dataset(32), batch_size=8), DataLoader(tiny_dataset(16), batch_size=8)
    trainer.fit(TinyClassifier(), train, val)
    path = tmp_path / "saved.ckpt"
    trainer.save_checkpoint(path)
    return path, {k: v.clone() for k, v in torch.load(path, weights_only=True)["state_dict"].items()}


@pytest.mark.parametrize("fn", ["validate", "fit"])
def test_the_module_renames_the_weights_it_is_restored_from(tmp_path: Path, fn: str) -> None:
    path, saved = _saved(tmp_path)
    model, seen = Renamed(), Seen()
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path / "again"), plugins=[seen],
                            enable_checkpointing=False, **QUIET)
    loader = DataLoader(tiny_dataset(16), batch_size=8)
    if fn == "validate":
        trainer.validate(model, loader, ckpt_path=str(path), verbose=False)
        assert torch.equal(model.body[0].weight, saved["net.0.weight"])
    else:  # max_epochs=1 reached: the resumed fit trains no batch
        trainer.fit(model, loader, ckpt_path=str(path))
        assert torch.equal(model.body[0].weight, saved["net.0.weight"])
    # the module's hook ran once, before the weights; the plugin's once, after them
    assert model.loads == ["module"] and seen.calls == [True]


def test_load_from_checkpoint_calls_the_hook_before_loading_the_weights(tmp_path: Path) -> None:
    path, saved = _saved(tmp_path)
    model = Renamed.load_from_checkpoint(path)
    assert model.loads == ["module"] and torch.equal(model.body[0].weight, saved["net.0.weight"])


# -- a fit that max_steps ended mid-epoch, resumed -----------------------------------------------------------------
class Batches(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, float]] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.seen.append((self.current_epoch, batch_idx, float(batch[0].sum())))


def _fit(root: Path, ckpt_path: str | None = None, **limits: Any) -> tuple[ember.Trainer, Batches]:
    ember.seed_everything(3)
    model = Batches()
    trainer = ember.Trainer(default_root_dir=str(root), **QUIET, **limits)
    trainer.fit(model, DataLoader(tiny_dataset(48), batch_size=8, shuffle=True), ckpt_path=ckpt_path)
    return trainer, model


@pytest.mark.parametrize("limits", [{"max_steps": 9}, {"max_steps": 4}])
def test_resuming_after_max_steps_goes_on_inside_the_epoch_exactly(tmp_path: Path, limits: dict) -> None:
    whole, whole_model = _fit(tmp_path / "whole", **limits)
    first, _ = _fit(tmp_path / "first", max_steps=2)
    path = str(next((tmp_path / "first").rglob("*.ckpt")))
    resumed, model = _fit(tmp_path / "resumed", ckpt_path=path, **limits)
    # the batches after the first two, in the order and epochs of the fit that never stopped
    assert model.seen == whole_model.seen[2:]
    assert (resumed.current_epoch, resumed.global_step) == (whole.current_epoch, whole.global_step)
    for a, b in zip(model.parameters(), whole_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_fit_bounded_by_epochs_counts_that_epoch_as_finished(tmp_path: Path) -> None:
    _fit(tmp_path / "first", max_steps=2)
    path = str(next((tmp_path / "first").rglob("*.ckpt")))
    resumed, model = _fit(tmp_path / "resumed", ckpt_path=path, max_epochs=2)
    assert [(e, i) for e, i, _ in model.seen] == [(1, i) for i in range(6)]
    assert (resumed.current_epoch, resumed.global_step) == (2, 8)


# -- the plugins a checkpoint hook goes to --------------------------------------------------------------------------
class OwnBackward(TinyClassifier):
    """A module that answers a role hook (ember registers an object answering it for the run)."""

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        loss.backward()

    def on_train_epoch_end(self) -> None:
        self.trainer.save_checkpoint(Path(self.trainer.default_root_dir) / "weights.ckpt", weights_only=True)


def test_a_weights_only_save_from_a_module_with_role_overrides(tmp_path: Path) -> None:
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), enable_checkpointing=False, **QUIET)
    trainer.fit(OwnBackward(), DataLoader(tiny_dataset(16), batch_size=8))
    assert "state_dict" in torch.load(tmp_path / "weights.ckpt", weights_only=True)
