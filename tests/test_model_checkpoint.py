"""``callback.model-checkpoint``: which files are written and kept, and when."""

from __future__ import annotations

import math
import os
from collections.abc import Generator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

import ember
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.plugins.checkpoint_io.torch_file import safe_load
from ember.testing import TinyClassifier, tiny_loaders

#: No progress bar, model summary or logger files: only what the test is about.
QUIET = {"accelerator": "cpu",
         "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False}



class Scripted(TinyClassifier):
    """Logs ``score`` = ``scores[epoch]`` at the end of each validation epoch."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.scores = scores

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.log("score", self.scores[self.current_epoch])


def fit(tmp_path: Path, callbacks: list[Any], epochs: int = 5, scores: list[float] | None = None,
        n: int = 32, **kwargs: Any) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=epochs, default_root_dir=str(tmp_path), **QUIET,
                            callbacks=callbacks, **kwargs)
    model = Scripted(scores or [0.0] * epochs)
    trainer.fit(model, *tiny_loaders(n=n))
    return trainer


def names(path: Path) -> list[str]:
    return sorted(os.listdir(path))


@pytest.mark.parametrize(("mode", "top_k", "kept", "best"), [
    ("min", 2, ["epoch=1-score=3.0.ckpt", "epoch=3-score=1.0.ckpt"], "epoch=3-score=1.0.ckpt"),
    ("max", 2, ["epoch=0-score=5.0.ckpt", "epoch=4-score=6.0.ckpt"], "epoch=4-score=6.0.ckpt"),
    ("min", 1, ["epoch=3-score=1.0.ckpt"], "epoch=3-score=1.0.ckpt"),
    ("max", -1, [f"epoch={e}-score={s:.1f}.ckpt" for e, s in enumerate([5, 3, 4, 1, 6])], "epoch=4-score=6.0.ckpt"),
])
def test_save_top_k_keeps_exactly_the_best_files(tmp_path: Path, mode: str, top_k: int, kept: list[str],
                                                 best: str) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="score", mode=mode, save_top_k=top_k,
                         filename="{epoch}-{score:.1f}", save_last=False)
    fit(tmp_path, [cb], scores=[5.0, 3.0, 4.0, 1.0, 6.0])
    assert names(tmp_path / "ck") == kept
    assert os.path.basename(cb.best_model_path) == best
    assert cb.best_model_score == float(best.split("score=")[1][:3])
    assert sorted(map(os.path.basename, cb.best_k_models)) == kept
    for name in kept:  # each kept file is the checkpoint of its epoch
        assert safe_load(str(tmp_path / "ck" / name))["loops"]["fit"]["epoch"] == int(name[6]) + 1


def test_nan_ranks_last(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=1, save_last=False, filename="{epoch}")
    fit(tmp_path, [cb], epochs=3, scores=[math.nan, 2.0, 3.0])
    assert names(tmp_path) == ["epoch=1.ckpt"]
    assert cb.best_model_score == 2.0


def test_without_monitor_keeps_the_newest_and_last(tmp_path: Path) -> None:
    trainer = fit(tmp_path, [], epochs=3)  # the default callback
    cb = trainer.checkpoint_callback
    assert isinstance(cb, ModelCheckpoint)
    assert names(tmp_path / "checkpoints") == ["epoch=2-step=12.ckpt", "last.ckpt"]
    assert cb.best_model_path == str(tmp_path / "checkpoints" / "epoch=2-step=12.ckpt")
    assert cb.last_model_path == str(tmp_path / "checkpoints" / "last.ckpt")


def test_last_is_always_a_whole_and_current_file(tmp_path: Path) -> None:
    seen = []

    class CheckLast:
        @ember.hookimpl(wrapper=True)
        def save_checkpoint(self, trainer: Any, path: str) -> Generator[None, Any, Any]:
            last = tmp_path / "ck" / "last.ckpt"
            result = yield
            assert not path.endswith("last.ckpt")  # last.ckpt is a link to bytes written once, never pickled
            if last.exists():  # after every write, last.ckpt is complete and one save behind at most
                seen.append(safe_load(str(last))["global_step"])
            return result

    cb = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2, save_top_k=-1)
    fit(tmp_path, [cb], plugins=[CheckLast()], epochs=2)
    assert seen == [2, 4, 6]  # last.ckpt follows the step file of the same moment
    assert os.path.samefile(tmp_path / "ck" / "last.ckpt", tmp_path / "ck" / "epoch=1-step=8.ckpt")
    assert names(tmp_path / "ck") == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt",
                                      "epoch=1-step=8.ckpt", "last.ckpt"]


def test_every_n_epochs(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=2, save_top_k=-1, save_last=False)
    fit(tmp_path, [cb], epochs=5)
    assert names(tmp_path) == ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"]


def test_train_time_interval(tmp_path: Path) -> None:
    always = ModelCheckpoint(dirpath=tmp_path / "a", train_time_interval=timedelta(0), save_top_k=-1,
                             save_last=False)
    never = ModelCheckpoint(dirpath=tmp_path / "b", train_time_interval=3600.0, save_top_k=-1)
    fit(tmp_path, [always, never], epochs=1)
    assert names(tmp_path / "a") == [f"epoch=0-step={s}.ckpt" for s in range(1, 5)]
    assert names(tmp_path / "b") == ["last.ckpt"]  # no save was due: save_last's one file, at the end


def test_filename_template_without_metric_names(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, filename="run-{epoch:02d}-{score:.3f}", monitor="score",
                         auto_insert_metric_name=False, save_last=False)
    fit(tmp_path, [cb], epochs=2, scores=[0.5, 0.25])
    assert names(tmp_path) == ["run-01-0.250.ckpt"]


def test_version_counter_protects_files_of_another_run(tmp_path: Path) -> None:
    (tmp_path / "epoch=0-step=4.ckpt").write_bytes(b"someone else's")
    cb = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, save_last=False)
    fit(tmp_path, [cb], epochs=1)
    assert names(tmp_path) == ["epoch=0-step=4-v1.ckpt", "epoch=0-step=4.ckpt"]
    assert (tmp_path / "epoch=0-step=4.ckpt").read_bytes() == b"someone else's"


def test_resumed_run_keeps_the_files_an_uninterrupted_run_keeps(tmp_path: Path) -> None:
    scores = [5.0, 3.0, 4.0, 1.0, 6.0, 0.5]

    def callbacks(root: Path) -> list[Any]:
        return [ModelCheckpoint(dirpath=root / "best", monitor="score", save_top_k=2, filename="{epoch}-{score}"),
                ModelCheckpoint(dirpath=root / "steps", every_n_train_steps=3)]

    ember.seed_everything(0)
    whole = fit(tmp_path / "whole", callbacks(tmp_path / "whole"), epochs=6, scores=scores)
    ember.seed_everything(0)
    fit(tmp_path / "parts", callbacks(tmp_path / "parts"), epochs=3, scores=scores)
    parts = ember.Trainer(max_epochs=6, default_root_dir=str(tmp_path / "parts"), **QUIET,
                          callbacks=callbacks(tmp_path / "parts"))
    parts.fit(Scripted(scores), *tiny_loaders(n=32), ckpt_path="last")
    for sub in ("best", "steps"):
        assert names(tmp_path / "parts" / sub) == names(tmp_path / "whole" / sub)
    assert os.path.basename(parts.checkpoint_callback.best_model_path) == \
        os.path.basename(whole.checkpoint_callback.best_model_path) == "epoch=5-score=0.5.ckpt"


def test_missing_monitor_fails_clearly(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val_los")
    with pytest.raises(ember.ConfigurationError, match=r"monitor='val_los'\) could not find 'val_los' among the "
                                                       r"logged metrics \['score', 'train_loss'\]"):
        fit(tmp_path, [cb], epochs=1)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "avg"}, r"ModelCheckpoint\(mode='avg'\) is invalid: `mode` can be 'min' or 'max' but got avg"),
    ({"save_top_k": 3}, r"save_top_k=3, monitor=None\) is not a valid setting"),
    ({"save_top_k": -2}, r"save_top_k=-2\) is invalid"),
    ({"every_n_train_steps": 5, "every_n_epochs": 1}, "every_n_train_steps and every_n_epochs are mutually "
                                                     "exclusive"),
    ({"train_time_interval": "1h"}, r"train_time_interval='1h'\) is invalid"),
])
def test_invalid_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ember.ConfigurationError, match=message):
        ModelCheckpoint(**kwargs)


def test_enable_checkpointing(tmp_path: Path) -> None:
    assert isinstance(ember.Trainer(accelerator="cpu").checkpoint_callback, ModelCheckpoint)
    assert ember.Trainer(accelerator="cpu", enable_checkpointing=False).checkpoint_callback is None
    mine = ModelCheckpoint(monitor="score")
    assert ember.Trainer(accelerator="cpu", callbacks=[mine]).checkpoint_callbacks == [mine]  # no second, default one
    with pytest.raises(ember.ConfigurationError, match=r"enable_checkpointing=False\) conflicts with "
                                                       "'callback.model-checkpoint' passed in callbacks"):
        ember.Trainer(accelerator="cpu", enable_checkpointing=False, callbacks=[mine])
    with pytest.raises(ember.ConfigurationError, match=r"enable_checkpointing=1\) is invalid"):
        ember.Trainer(accelerator="cpu", enable_checkpointing=1)
    trainer = fit(tmp_path, [], epochs=1, enable_checkpointing=False)
    assert not (tmp_path / "checkpoints").exists()
    assert trainer.checkpoint_callback is None


def test_fast_dev_run_and_sanity_check_write_nothing(tmp_path: Path) -> None:
    fit(tmp_path, [], epochs=2, fast_dev_run=2)
    assert not (tmp_path / "checkpoints").exists()


def test_ckpt_path_best_and_last_for_evaluation(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", mode="max", filename="{epoch}")
    trainer = fit(tmp_path, [cb], epochs=3, scores=[1.0, 3.0, 2.0, 0.0])
    best_weights = safe_load(str(tmp_path / "epoch=1.ckpt"))["state_dict"]
    trainer.test(dataloaders=tiny_loaders(n=8)[1], ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == str(tmp_path / "epoch=1.ckpt")
    assert all(torch.equal(v, trainer.module.state_dict()[k]) for k, v in best_weights.items())
    trainer.validate(dataloaders=tiny_loaders(n=8)[1], ckpt_path="last", verbose=False)
    assert trainer.ckpt_path == str(tmp_path / "last.ckpt")


def test_ckpt_path_last_without_checkpoint_starts_fresh(tmp_path: Path) -> None:
    trainer = ember.Trainer(max_epochs=1, default_root_dir=str(tmp_path), **QUIET)
    with pytest.warns(UserWarning, match="ckpt_path='last': there is no last checkpoint at .* No checkpoint will be "
                                         "loaded"):
        trainer.fit(TinyClassifier(), *tiny_loaders(n=16), ckpt_path="last")
    assert trainer.ckpt_path is None
    assert trainer.global_step == 2


def test_state_is_stored_under_a_stable_key(tmp_path: Path) -> None:
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, filename="{epoch}")
    fit(tmp_path, [cb], epochs=2, scores=[2.0, 1.0])
    state = safe_load(str(tmp_path / "last.ckpt"))["plugins"][cb.state_key]
    assert cb.state_key.startswith("ModelCheckpoint{'monitor': 'score', 'mode': 'min'")
    assert state["best_model_path"] == str(tmp_path / "epoch=1.ckpt")
    assert state["best_k_models"] == {str(tmp_path / "epoch=0.ckpt"): 2.0, str(tmp_path / "epoch=1.ckpt"): 1.0}
    assert state["last_model_path"] == str(tmp_path / "last.ckpt")
    fresh = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=2, filename="{epoch}")
    fresh.load_state_dict(state)
    assert fresh.best_k_models == cb.best_k_models and fresh.kth_best_model_path == cb.kth_best_model_path


def test_no_per_step_hook_unless_saving_per_step() -> None:
    trainer = ember.Trainer(accelerator="cpu", enable_checkpointing=True)
    default = trainer.checkpoint_callback
    assert default.on_train_batch_end is None  # not registered: costs nothing per batch
    assert callable(ModelCheckpoint(every_n_train_steps=5).on_train_batch_end)


def test_hook_order_of_a_save_at_the_epoch_boundary(tmp_path: Path) -> None:
    from ember.testing import HookRecorder

    trainer = ember.Trainer(max_epochs=2, default_root_dir=str(tmp_path), **QUIET)
    recorder = HookRecorder().attach(trainer)
    trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
    names = recorder.names
    second_end = [i for i, n in enumerate(names) if n == "on_train_epoch_end"][1]
    assert names[second_end:names.index("on_train_end")] == [
        "on_train_epoch_end",
        "last_checkpoint_path",  # which file goes last
        "on_save_checkpoint",  # the checkpoint is built once ...
        "save_checkpoint",  # ... written to epoch=1-step=4.ckpt,
        "remove_checkpoint",  # epoch=0-step=2.ckpt leaves the top 1,
    ]  # and last.ckpt comes last: a link to the bytes just written, not a second save_checkpoint


class FailsMidEpoch(Scripted):
    """Raises in ``training_step`` at global step ``at`` (after ``at`` optimizer steps)."""

    def __init__(self, at: int) -> None:
        super().__init__([0.0] * 5)
        self.at = at

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.trainer.global_step == self.at:
            raise RuntimeError("Trouble!")
        return super().training_step(batch, batch_idx)


def fail(tmp_path: Path, callback: ModelCheckpoint, at: int = 6) -> ember.Trainer:
    trainer = ember.Trainer(max_epochs=3, default_root_dir=str(tmp_path), **QUIET, callbacks=[callback])
    with pytest.raises(RuntimeError, match="Trouble!"):
        trainer.fit(FailsMidEpoch(at), *tiny_loaders(n=32))  # 4 steps per epoch
    return trainer


def test_save_on_exception_writes_the_state_at_the_failure(tmp_path: Path) -> None:
    fail(tmp_path / "off", ModelCheckpoint(dirpath=tmp_path / "off"))
    assert names(tmp_path / "off") == ["epoch=0-step=4.ckpt", "last.ckpt"]

    on = tmp_path / "on"
    fail(on, ModelCheckpoint(dirpath=on, save_on_exception=True))
    assert names(on) == ["epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"]
    assert safe_load(on / "epoch=1-step=6.ckpt")["global_step"] == 6
    assert safe_load(on / "last.ckpt")["global_step"] == 4  # the newest safe point, for an exact resume

    before = (on / "epoch=1-step=6.ckpt").read_bytes()
    fail(on, ModelCheckpoint(dirpath=on, save_on_exception=True))  # a second run, same folder
    assert (on / "epoch=1-step=6.ckpt").read_bytes() == before  # never overwritten
    assert (on / "epoch=1-step=6-v1.ckpt").is_file()


def test_save_on_exception_skips_a_step_already_saved(tmp_path: Path) -> None:
    fail(tmp_path, ModelCheckpoint(dirpath=tmp_path, filename="{step}", save_on_exception=True,
                                   every_n_train_steps=1, auto_insert_metric_name=False), at=2)
    assert names(tmp_path) == ["2.ckpt", "last.ckpt"]
