"""Profilers: ``profiler.simple`` and ``profiler.torch`` selected by name, identity or instance; their files
and summaries from real runs; nothing left behind when off or after a run."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import pytest
import torch

import ember
from ember.plugins.profilers.simple import DATA_PHASE, SETUP_PHASE, SimpleProfiler
from ember.plugins.profilers.torch_profiler import TorchProfiler
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders

QUIET = {k: v for k, v in FAST_TRAINER_ARGS.items() if k != "max_epochs"}


def _profiler_of(trainer: ember.Trainer) -> Any:
    return next(p for ident, p in trainer.extra_plugins if ident.startswith("profiler."))


@pytest.mark.parametrize("arg", ["simple", "profiler.simple"])
def test_simple_profiler_by_name_writes_and_prints_a_summary(tmp_path: Any, capsys: Any, arg: str) -> None:
    train, val = tiny_loaders(n=40, batch_size=8)  # 5 batches each
    trainer = ember.Trainer(max_epochs=2, default_root_dir=tmp_path, profiler=arg, **QUIET)
    trainer.fit(TinyClassifier(), train, val)
    profiler = _profiler_of(trainer)
    assert isinstance(profiler, SimpleProfiler) and trainer.plugin_manager.get_name(profiler) is None

    path = tmp_path / "simple-profile-fit.txt"  # no logger: default_root_dir
    assert profiler.path == str(path)
    text = path.read_text()
    assert text.startswith("Profile of fit")
    printed = capsys.readouterr().out
    assert text.strip() in printed

    summary = json.loads((tmp_path / "simple-profile-fit.json").read_text())
    phases, hooks = summary["phases"], summary["hooks"]
    assert phases["train epoch"]["calls"] == 2
    assert phases["train batch"]["calls"] == 10
    assert phases[DATA_PHASE]["calls"] == 10
    assert phases["validation"]["calls"] == 2 and phases["validation batch"]["calls"] == 10
    assert phases[SETUP_PHASE]["calls"] == 1
    assert hooks["step"]["calls"] == 20  # 10 training + 10 validation steps
    assert hooks["backward"]["calls"] == hooks["optimizer_step"]["calls"] == 10
    assert hooks["unscale_gradients"]["calls"] == 10  # the no-op fallback shows while profiling
    # phases nest: batches within epochs within the run
    assert phases["train batch"]["total_s"] <= phases["train epoch"]["total_s"] <= phases["fit"]["total_s"]
    assert phases["train batch"]["total_s"] >= hooks["backward"]["total_s"]
    for line in ("train batch", "backward", "optimizer_step"):
        assert any(row.startswith(line) for row in text.splitlines())


def test_simple_profiler_instance_with_a_directory_and_sanity_check(tmp_path: Any) -> None:
    profiler = SimpleProfiler(dirpath=tmp_path / "prof", filename="mine", print_summary=False)
    train, val = tiny_loaders(n=16, batch_size=8)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, profiler=profiler,
                            **{**QUIET, "num_sanity_val_steps": 1})
    trainer.fit(TinyClassifier(), train, val)
    trainer.validate(TinyClassifier(), val, verbose=False)
    fit = json.loads((tmp_path / "prof" / "mine-fit.json").read_text())
    assert fit["phases"]["sanity check"]["calls"] == 1
    assert fit["phases"]["validation"]["calls"] == 1  # the sanity check's validation is not counted here
    validate = json.loads((tmp_path / "prof" / "mine-validate.json").read_text())
    assert validate["fn"] == "validate" and validate["phases"]["validation batch"]["calls"] == 2
    assert "train batch" not in validate["phases"]
    assert profiler.summary == validate


def test_simple_profiler_goes_next_to_the_logger(tmp_path: Any) -> None:
    train, val = tiny_loaders(n=16, batch_size=8)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, profiler=SimpleProfiler(print_summary=False),
                            **{**QUIET, "logger": True})
    trainer.fit(TinyClassifier(), train, val)
    assert os.path.isfile(os.path.join(trainer.log_dir, "simple-profile-fit.txt"))
    assert trainer.log_dir != str(tmp_path)


def test_monitoring_is_removed_after_a_run_and_after_a_failure(tmp_path: Any) -> None:
    class Fails(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 1:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    profiler = SimpleProfiler(print_summary=False)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, profiler=profiler, **QUIET)
    train, val = tiny_loaders(n=32, batch_size=8)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Fails(), train, val)
    assert not trainer.plugin_manager.monitored
    assert profiler.summary["phases"]["train batch"]["calls"] == 1  # the batch that finished
    trainer.fit(TinyClassifier(), train, val)
    assert not trainer.plugin_manager.monitored
    assert profiler.summary["phases"]["train batch"]["calls"] == 4


def test_off_by_default_and_nothing_registered() -> None:
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    assert not any(ident.startswith("profiler.") for ident, _ in trainer.extra_plugins)


@pytest.mark.parametrize("value", [True, 1, SimpleProfiler])
def test_bad_profiler_argument(value: Any) -> None:
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(profiler=.*'simple' or 'torch'"):
        ember.Trainer(accelerator="cpu", profiler=value)


def test_unknown_profiler_name_suggests_the_closest() -> None:
    with pytest.raises(ember.PluginError, match="simple"):
        ember.Trainer(accelerator="cpu", profiler="simpel")


def test_torch_profiler_writes_a_chrome_trace_with_ember_labels(tmp_path: Any, capsys: Any) -> None:
    train, val = tiny_loaders(n=48, batch_size=8)  # 6 batches: wait 1, warm up 1, record 3
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, profiler="torch", **QUIET)
    trainer.fit(TinyClassifier(), train, val)
    profiler = _profiler_of(trainer)
    assert isinstance(profiler, TorchProfiler)
    path = tmp_path / "torch-trace-fit.json"
    assert profiler.path == str(path)
    trace = json.loads(path.read_text())
    names = {event.get("name", "") for event in trace["traceEvents"]}
    assert {"ember.step[train]", "ember.backward", "ember.optimizer_step", "ember.zero_grad"} <= names
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]  # the three recorded batches
    assert any(n.startswith("aten::") for n in names)  # torch's own operators are there too
    table = (tmp_path / "torch-trace-fit.txt").read_text()
    assert "Self CPU" in table and "ember.backward" in table
    assert "trace written to" in capsys.readouterr().out


def test_torch_profiler_whole_run_of_validate(tmp_path: Any) -> None:
    profiler = TorchProfiler(schedule=None, print_summary=False)
    _, val = tiny_loaders(n=16, batch_size=8)
    ember.Trainer(default_root_dir=tmp_path, profiler=profiler, **QUIET).validate(TinyClassifier(), val,
                                                                                  verbose=False)
    trace = json.loads((tmp_path / "torch-trace-validate.json").read_text())
    names = [event.get("name", "") for event in trace["traceEvents"]]
    assert names.count("ember.step[validate]") == 2
    assert "ember.batch_to_device" in names


def test_torch_profiler_warns_when_the_run_is_too_short_to_record(tmp_path: Any) -> None:
    train, val = tiny_loaders(n=8, batch_size=8)  # 1 batch: still in the schedule's wait
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path, profiler=TorchProfiler(print_summary=False),
                            **QUIET)
    with pytest.warns(UserWarning, match="recorded nothing"):
        trainer.fit(TinyClassifier(), train, val)
    assert not (tmp_path / "torch-trace-fit.json").exists()


def test_torch_profiler_bad_schedule() -> None:
    with pytest.raises(ValueError, match="wait, warmup, active"):
        TorchProfiler(schedule=(1, 1, 0))


@pytest.mark.parametrize("schedule", [(1, 1, 3), None])
def test_torch_profiler_starts_and_steps_without_torch_warnings(tmp_path: Any, schedule: Any) -> None:
    # torch 2.10 and 2.11 warn at every profiler start that events of earlier cycles are dropped, unless told to
    # keep them; a run records one cycle, so the warning is noise (and, raised as an error mid-step, it left
    # torch's profiler in a state whose stop() crashed the process).
    train, val = tiny_loaders(n=48, batch_size=8)
    trainer = ember.Trainer(max_epochs=1, default_root_dir=tmp_path,
                            profiler=TorchProfiler(schedule=schedule, print_summary=False), **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)  # recorded, not raised: torch's profiler must not stop mid-step
        trainer.fit(TinyClassifier(), train, val)
    assert [f"{w.filename}: {w.message}" for w in caught] == []
    assert _profiler_of(trainer).path is not None
