"""``ember.testing``: the helpers and pytest fixtures plugin authors test with."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import ember
from ember.core.hooks.discovery import discover
from ember.testing import HookRecorder, TinyClassifier, check_plugin, checkpoint_roundtrip, run_plugin


class CountSteps:
    identity = "callback.count-steps"

    def __init__(self) -> None:
        self.steps = 0

    @ember.hookimpl
    def on_before_optimizer_step(self) -> None:
        self.steps += 1


def test_ember_run_fits_with_the_plugin_and_records(ember_run, tmp_path) -> None:
    plugin = CountSteps()
    result = ember_run(plugin, max_epochs=2)
    assert plugin.steps == 16 and result.trainer.global_step == 16
    assert result.trainer.default_root_dir == str(tmp_path)
    result.recorder.assert_called("on_before_optimizer_step", times=16, by="callback.count-steps")
    result.recorder.assert_called("on_train_epoch_start", times=2)
    result.recorder.assert_order("on_fit_start", "on_train_start", "on_before_optimizer_step", "on_train_end")
    result.recorder.assert_not_called("on_sanity_check_start")
    assert result.recorder.calls_of("on_train_batch_end")[3]["batch_idx"] == 3


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_run_plugin_other_stages(stage) -> None:
    result = run_plugin(CountSteps(), stage=stage)
    name = {"validate": "validation", "test": "test", "predict": "predict"}[stage]
    result.recorder.assert_called(f"on_{name}_batch_end", times=8)
    result.recorder.assert_not_called("on_train_start")
    if stage == "predict":
        assert len(result.output) == 8 and result.output[0].shape == (8,)
    else:
        assert isinstance(result.output, list) and result.output[0]


def test_run_plugin_rejects_an_unknown_stage() -> None:
    with pytest.raises(ValueError, match="stage='train'"):
        run_plugin(stage="train")


def test_record_events_false_records_only_implemented_hooks() -> None:
    result = run_plugin(CountSteps(), record_events=False)
    result.recorder.assert_called("on_before_optimizer_step", times=8)
    result.recorder.assert_not_called("on_train_epoch_start")
    assert "testing.every-event" not in result.recorder.plugins_for("on_before_optimizer_step")


def test_recorder_assertion_messages() -> None:
    recorder = run_plugin(CountSteps(), limit_train_batches=2).recorder
    with pytest.raises(AssertionError, match=r"was called 2 times, expected 3"):
        recorder.assert_called("on_before_optimizer_step", times=3)
    with pytest.raises(AssertionError, match=r"'module' never implemented it"):
        recorder.assert_called("on_before_optimizer_step", by="module")
    with pytest.raises(AssertionError, match=r"never called; called: .*on_train_start"):
        recorder.assert_called("on_sanity_check_end")
    with pytest.raises(AssertionError, match=r"expected 'on_fit_start' after on_train_end"):
        recorder.assert_order("on_train_end", "on_fit_start")
    with pytest.raises(AssertionError, match=r"not an ember hook\. Did you mean 'on_train_start'\?"):
        recorder.assert_called("on_train_strat")
    with pytest.raises(AssertionError, match=r"was called 2 times, expected never"):
        recorder.assert_not_called("on_before_optimizer_step")


def test_assert_plugin_order(ember_run) -> None:
    class A(CountSteps):
        identity = "callback.a"

    class B(CountSteps):
        identity = "callback.b"

    recorder = ember_run(A(), B(), limit_train_batches=1).recorder
    recorder.assert_plugin_order("on_before_optimizer_step", "callback.a", "callback.b")
    with pytest.raises(AssertionError, match="ran in the order"):
        recorder.assert_plugin_order("on_before_optimizer_step", "callback.b", "callback.a")


def test_fixtures_from_the_pytest11_entry_point(tiny_model, tiny_data, ember_trainer, hook_recorder) -> None:
    assert isinstance(tiny_model, TinyClassifier) and len(tiny_data) == 2
    trainer = ember_trainer(limit_train_batches=3)
    hook_recorder.attach(trainer)
    trainer.fit(tiny_model, *tiny_data)
    hook_recorder.assert_called("on_train_batch_end", times=3)
    assert isinstance(hook_recorder, HookRecorder)


def test_check_plugin() -> None:
    assert check_plugin(CountSteps()) == ["on_before_optimizer_step"]

    class Wrong:
        @ember.hookimpl
        def on_before_optimizer_step(self, optimiser) -> None:
            pass

    with pytest.raises(ember.PluginError, match="optimiser"):
        check_plugin(Wrong())


class Ema:
    identity = "callback.ema"

    def __init__(self, value: object = None) -> None:
        self.value = value

    @ember.hookimpl
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["plugins"][self.identity] = {"value": self.value}

    @ember.hookimpl
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.value = checkpoint["plugins"][self.identity]["value"]


def test_checkpoint_roundtrip_restores_state() -> None:
    restored = Ema()
    loaded = checkpoint_roundtrip(Ema(torch.arange(3.0)), restored)
    assert torch.equal(restored.value, torch.arange(3.0))
    assert list(loaded["plugins"]) == ["callback.ema"]


def test_checkpoint_roundtrip_rejects_state_that_needs_pickle() -> None:
    from fractions import Fraction

    with pytest.raises(AssertionError, match="does not load with weights_only=True"):
        checkpoint_roundtrip(Ema(Fraction(1, 3)), Ema())
    with pytest.raises(AssertionError, match="cannot be saved"):
        checkpoint_roundtrip(Ema(lambda: None), Ema())


def test_ember_distribution_is_discovered_and_removed(ember_distribution) -> None:
    ember_distribution("fake-dist", "4.5", entry_points={"ember.plugins": {"callback.fake": "fake_mod:Fake"}},
                       modules={"fake_mod.py": "class Fake:\n    pass\n"})
    info = discover().plugins["callback.fake"][0]
    assert (info.dist_name, info.dist_version, info.value) == ("fake-dist", "4.5", "fake_mod:Fake")
    assert type(info.load()).__name__ == "Fake"


def test_the_fake_distribution_is_gone_after_the_test() -> None:
    assert "callback.fake" not in discover().plugins
    assert "fake_mod" not in sys.modules


@pytest.mark.slow
def test_pytest_loads_the_fixtures_in_a_fresh_session(tmp_path) -> None:
    # pytest finds ember.testing through the pytest11 entry point of the installed ember distribution,
    # without any conftest.py or -p option.
    (tmp_path / "test_author.py").write_text(textwrap.dedent("""
        import ember

        class Hello:
            identity = "callback.hello"

            @ember.hookimpl
            def on_fit_end(self, trainer):
                trainer.__dict__["hello"] = True

        def test_plugin(ember_run):
            result = ember_run(Hello(), limit_train_batches=1)
            assert result.trainer.hello
            result.recorder.assert_called("on_fit_end", times=1, by="callback.hello")
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
