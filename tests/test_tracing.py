"""Hook tracing: ``Trainer(trace=...)`` and ``EMBER_TRACE``."""

from __future__ import annotations

import io
import json

import pluggy
import pytest
import torch

import ember
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _calls(records: list[dict], hook: str) -> list[dict]:
    return [r for r in records if r.get("hook") == hook]


class HalveGradients:
    """Changes the gradients: the kind of plugin a trace should expose."""

    identity = "callback.halve-grads"

    @ember.hookimpl
    def on_after_backward(self, module: torch.nn.Module) -> None:
        for p in module.parameters():
            p.grad.mul_(0.5)


class StepWrapper:
    identity = "callback.step-wrapper"

    @ember.hookimpl(wrapper=True)
    def optimizer_step(self):
        return (yield)


def _fit(tmp_path, **kwargs) -> ember.Trainer:
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "limit_train_batches": 2, "limit_val_batches": 1,
                               "default_root_dir": str(tmp_path), **kwargs})
    trainer.fit(TinyClassifier(), *tiny_loaders())
    return trainer


def test_trace_to_a_jsonl_file_shows_who_changed_the_gradients(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    _fit(tmp_path, trace=str(path), plugins=[HalveGradients(), StepWrapper()])
    records = _records(path.read_text())
    header = records[0]
    assert header["run"] == "fit"
    assert [p["plugin"] for p in header["plugins"]][:2] == ["callback.halve-grads", "callback.step-wrapper"]
    assert {"plugin": "precision.32-true", "from": f"ember {ember.__version__}"} in header["plugins"]

    calls = records[1:]
    assert [c["seq"] for c in calls] == list(range(len(calls)))
    backward = _calls(calls, "on_after_backward")
    assert len(backward) == 2
    assert [impl["plugin"] for impl in backward[0]["impls"]] == ["callback.halve-grads"]
    assert backward[0]["impls"][0]["us"] > 0 and backward[0]["us"] >= backward[0]["impls"][0]["us"]
    assert [(c["epoch"], c["step"]) for c in backward] == [(0, 0), (0, 1)]

    step = _calls(calls, "optimizer_step")[0]
    assert step["impls"][0] == {"plugin": "callback.step-wrapper", "wrapper": True, "us": step["impls"][0]["us"]}
    assert step["impls"][1]["plugin"] == "core.defaults" and step["impls"][1]["returned"] is True

    names = [c["hook"] for c in calls]
    assert names.index("root_device") < names.index("step") < names.index("on_after_backward") \
        < names.index("optimizer_step")
    assert "on_before_backward" not in names  # implemented by nobody: not called, so not traced


def test_only_the_answering_implementation_of_a_firstresult_hook_runs(tmp_path) -> None:
    class Device:
        identity = "callback.device"

        @ember.hookimpl(tryfirst=True)
        def root_device(self) -> torch.device:
            return torch.device("cpu")

    stream = io.StringIO()
    _fit(tmp_path, trace=stream, plugins=[Device()])
    (root_device,) = _calls(_records(stream.getvalue()), "root_device")
    assert root_device["impls"] == [{"plugin": "callback.device", "us": root_device["impls"][0]["us"],
                                     "returned": True}]


@pytest.mark.parametrize("value", ["1", "stderr", "true"])
def test_environment_variable_to_stderr(tmp_path, monkeypatch, capsys, value) -> None:
    monkeypatch.setenv("EMBER_TRACE", value)
    _fit(tmp_path)
    err = capsys.readouterr().err
    records = _records(err)
    assert records[0]["run"] == "fit" and any(r.get("hook") == "step" for r in records)


def test_stdout_and_the_argument_wins_over_the_environment(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("EMBER_TRACE", str(tmp_path / "env.jsonl"))
    _fit(tmp_path, trace="stdout")
    assert _records(capsys.readouterr().out)[0]["run"] == "fit"
    assert not (tmp_path / "env.jsonl").exists()
    _fit(tmp_path, trace=False)
    assert not (tmp_path / "env.jsonl").exists() and capsys.readouterr().out == ""


def test_environment_path_and_off_values(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMBER_TRACE", str(tmp_path / "sub" / "env.jsonl"))
    _fit(tmp_path)
    assert _records((tmp_path / "sub" / "env.jsonl").read_text())[0]["run"] == "fit"
    monkeypatch.setenv("EMBER_TRACE", "0")
    trainer = ember.Trainer(accelerator="cpu")
    assert trainer.tracer is None


def test_a_trainer_rewrites_its_file_once_then_appends(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text("stale\n")
    trainer = _fit(tmp_path, trace=path)
    trainer.validate(dataloaders=tiny_loaders()[1], verbose=False)
    runs = [r["run"] for r in _records(path.read_text()) if "run" in r]
    assert runs == ["fit", "validate"]
    _fit(tmp_path, trace=path)
    assert [r["run"] for r in _records(path.read_text()) if "run" in r] == ["fit"]


def test_nested_calls_follow_their_outer_call(tmp_path) -> None:
    class Reducer:
        identity = "callback.reducer"

        @ember.hookimpl
        def on_train_batch_end(self, trainer) -> None:
            trainer.reduce(torch.ones(1))

    stream = io.StringIO()
    _fit(tmp_path, trace=stream, plugins=[Reducer()])
    calls = _records(stream.getvalue())[1:]
    i = next(i for i, c in enumerate(calls) if c["hook"] == "on_train_batch_end")
    outer, inner = calls[i], calls[i + 1]
    assert (outer["depth"], inner["hook"], inner["depth"]) == (0, "reduce", 1)
    assert inner["seq"] == outer["seq"] + 1 and inner["us"] <= outer["us"]


def test_errors_are_traced_with_the_implementation_that_raised(tmp_path) -> None:
    class Broken:
        identity = "callback.broken"

        @ember.hookimpl
        def on_train_batch_end(self) -> None:
            raise ValueError("bad plugin")

        @ember.hookimpl
        def on_exception(self) -> None:
            pass

    stream = io.StringIO()
    with pytest.raises(ValueError, match="bad plugin"):
        _fit(tmp_path, trace=stream, plugins=[Broken()])
    records = _records(stream.getvalue())
    (failed,) = _calls(records, "on_train_batch_end")
    assert failed["error"] == "ValueError: bad plugin"
    assert failed["impls"] == [{"plugin": "callback.broken", "us": failed["impls"][0]["us"], "raised": "ValueError"}]
    (exception,) = _calls(records, "on_exception")
    assert exception["impls"][0]["plugin"] == "callback.broken"


def test_a_wrapper_that_raises_is_named(tmp_path) -> None:
    class BadWrapper:
        identity = "callback.bad-wrapper"

        @ember.hookimpl(wrapper=True)
        def zero_grad(self):
            yield
            raise RuntimeError("after the zero_grad")

    stream = io.StringIO()
    with pytest.raises(RuntimeError, match="after the zero_grad"):
        _fit(tmp_path, trace=stream, plugins=[BadWrapper()])
    (call,) = _calls(_records(stream.getvalue()), "zero_grad")
    wrapper, inner = call["impls"]
    assert wrapper["plugin"] == "callback.bad-wrapper" and wrapper["raised"] == "RuntimeError"
    assert "raised" not in inner


def test_tracing_off_installs_nothing(tmp_path) -> None:
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "limit_train_batches": 1, "trace": False,
                               "default_root_dir": str(tmp_path)})
    seen = {}

    class Look:
        @ember.hookimpl
        def on_train_start(self, trainer) -> None:
            seen["monitors"] = trainer.plugin_manager.monitors
            seen["step"] = trainer.hook.step

    trainer.extra_plugins.append(("callback.look", Look()))
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert trainer.tracer is None
    assert seen["monitors"] == ()
    # The hook's compiled call, with no monitoring layer around it.
    assert "def step(" in (seen["step"].__doc__ or "")


def test_tracing_on_monitors_the_table_and_is_removed_after_the_run(tmp_path) -> None:
    seen = {}

    class Look:
        @ember.hookimpl
        def on_train_start(self, trainer) -> None:
            seen["monitored"] = trainer.plugin_manager.monitored
            seen["step"] = trainer.hook.step

    trainer = _fit(tmp_path, trace=io.StringIO(), plugins=[Look()])
    assert seen["monitored"] is True and not isinstance(seen["step"], pluggy.HookCaller)
    assert seen["step"].__doc__ is None  # the monitoring layer, not the bare compiled call
    assert trainer.plugin_manager.monitored is False


@pytest.mark.parametrize("bad", [3, ["stderr"], object()])
def test_invalid_trace_argument(bad) -> None:
    with pytest.raises(ember.ConfigurationError, match=r"Trainer\(trace="):
        ember.Trainer(accelerator="cpu", trace=bad)
