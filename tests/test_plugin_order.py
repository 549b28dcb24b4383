"""Order between plugins: the order given, identity order for always-on plugins, tryfirst/trylast, wrappers.
Never the order distributions happen to be installed in."""

from __future__ import annotations

import pytest
import torch
from dist_support import needs_fsdp

import ember

AUTOLOAD_MODULE = '''
import ember

class Recorder:
    def __init__(self, identity):
        self.identity = identity

    @ember.hookimpl
    def on_train_start(self, trainer):
        trainer.__dict__.setdefault("order", []).append(self.identity)

    @ember.hookimpl(wrapper=True)
    def optimizer_step(self, trainer):
        trainer.__dict__.setdefault("wrap", []).append("enter " + self.identity)
        result = yield
        trainer.__dict__["wrap"].append("exit " + self.identity)
        return result

def make(identity):
    return type(identity.replace(".", "_").replace("-", "_"), (Recorder,), {"__init__": lambda self: Recorder.__init__(self, identity)})

Zeta, Alpha, Mid = make("callback.zeta"), make("callback.alpha"), make("callback.mid")
'''


class Mark:
    def __init__(self, name: str, **opts: bool) -> None:
        self.identity = f"callback.{name}"
        self.opts = opts

    def on_train_start(self, trainer) -> None:
        trainer.__dict__.setdefault("order", []).append(self.identity)


def _tryfirst() -> object:
    class First(Mark):
        @ember.hookimpl(tryfirst=True)
        def on_train_start(self, trainer) -> None:
            trainer.__dict__.setdefault("order", []).append(self.identity)

    return First("first")


def _trylast() -> object:
    class Last(Mark):
        @ember.hookimpl(trylast=True)
        def on_train_start(self, trainer) -> None:
            trainer.__dict__.setdefault("order", []).append(self.identity)

    return Last("last")


def test_callbacks_and_plugins_run_in_the_order_given(ember_run) -> None:
    result = ember_run(Mark("p1"), Mark("p2"), callbacks=[Mark("c1"), Mark("c2")], limit_train_batches=1)
    assert result.trainer.order == ["callback.p1", "callback.p2", "callback.c1", "callback.c2"]


def test_tryfirst_and_trylast_move_an_implementation(ember_run) -> None:
    result = ember_run(Mark("a"), _trylast(), Mark("b"), _tryfirst(), limit_train_batches=1)
    assert result.trainer.order == ["callback.first", "callback.a", "callback.b", "callback.last"]


def test_plugins_run_before_the_module_and_the_module_before_role_plugins(ember_run) -> None:
    from ember.testing import TinyClassifier

    class Model(TinyClassifier):
        def on_train_start(self, trainer) -> None:
            trainer.__dict__.setdefault("order", []).append("module")

    class Precision(Mark):
        role = "precision"

    result = ember_run(Precision("precision-probe"), Mark("x"), model=Model(), limit_train_batches=1)
    assert result.trainer.order == ["callback.x", "module", "callback.precision-probe"]
    assert result.recorder.plugins_for("step")[-1] == "core.defaults"


@pytest.mark.parametrize("install_order", [("dist-a", "dist-b", "dist-c"), ("dist-c", "dist-b", "dist-a"),
                                           ("dist-b", "dist-c", "dist-a")])
def test_always_on_plugins_run_in_identity_order_whatever_the_installation_order(
        ember_distribution, ember_run, install_order) -> None:
    provides = {"dist-a": ("callback.zeta", "Zeta"), "dist-b": ("callback.alpha", "Alpha"),
                "dist-c": ("callback.mid", "Mid")}
    ember_distribution("order-module", modules={"order_plugins.py": AUTOLOAD_MODULE})
    for dist in install_order:
        identity, attr = provides[dist]
        ember_distribution(dist, entry_points={"ember.autoload": {identity: f"order_plugins:{attr}"}})
    result = ember_run(limit_train_batches=1)
    assert result.trainer.order == ["callback.alpha", "callback.mid", "callback.zeta"]
    # Wrappers nest in the same order: the first in the order is the outermost.
    assert result.trainer.wrap[:6] == ["enter callback.alpha", "enter callback.mid", "enter callback.zeta",
                                       "exit callback.zeta", "exit callback.mid", "exit callback.alpha"]
    # Explicit plugins come before always-on ones.
    explicit = ember_run(Mark("explicit"), limit_train_batches=1)
    assert explicit.trainer.order[0] == "callback.explicit"


def test_wrappers_given_first_are_outermost(ember_run) -> None:
    log: list[str] = []

    class Wrap:
        def __init__(self, name: str) -> None:
            self.identity = f"callback.{name}"

        @ember.hookimpl(wrapper=True)
        def backward(self):
            log.append(f"enter {self.identity}")
            try:
                return (yield)
            finally:
                log.append(f"exit {self.identity}")

    ember_run(Wrap("outer"), Wrap("inner"), limit_train_batches=1)
    assert log == ["enter callback.outer", "enter callback.inner", "exit callback.inner", "exit callback.outer"]


# -- plugins talk through hooks ----------------------------------------------------------------------------------


@needs_fsdp
@pytest.mark.parametrize(("precision", "expected"), [("bf16-mixed", "torch.bfloat16"), ("16-mixed", "torch.float16"),
                                                     ("32-true", "None"), ("bf16-true", "None")])
def test_fsdp_follows_the_precision_through_a_hook(precision: str, expected: str) -> None:
    """FSDP's MixedPrecisionPolicy comes from the precision's mixed_precision_dtype answer, not from a table of
    precision names kept in the strategy."""
    from ember.plugins.strategies.fsdp import FSDPStrategy
    from ember.testing import TinyClassifier, tiny_loaders

    seen = {}

    class Ask:
        def on_train_start(self, trainer) -> None:
            policy = FSDPStrategy()._mp_policy(trainer)
            seen["param_dtype"] = str(policy.param_dtype)
            seen["reduce_dtype"] = str(policy.reduce_dtype)

    trainer = ember.Trainer(max_epochs=1, limit_train_batches=1, precision=precision, callbacks=[Ask()],
                            accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(TinyClassifier(), tiny_loaders(n=8)[0])
    assert seen["param_dtype"] == expected
    assert seen["reduce_dtype"] == ("torch.float32" if expected != "None" else "None")


def test_ddp_runs_the_training_step_through_its_model_without_touching_the_module() -> None:
    """The fallback step runs the training step through the strategy's wrapped model (setup_module's answer);
    no plugin rewrites the module's methods."""
    from ember.testing import TinyClassifier, tiny_loaders

    calls: list[str] = []

    class Runner(torch.nn.Module):
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module = module

        def forward(self, batch, batch_idx):
            calls.append("through the wrapped model")
            return self.module.training_step(batch, batch_idx)

    class Wraps:
        @ember.hookimpl
        def setup_module(self, module):
            return Runner(module)

    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, plugins=[Wraps()],
                            accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    train, val = tiny_loaders(n=16)
    trainer.fit(model, train, val)
    assert calls == ["through the wrapped model"] * 2  # training steps only: validation calls the module
    assert "training_step" not in vars(model)
