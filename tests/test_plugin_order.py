"""Order between plugins: the order given, identity order for always-on plugins, tryfirst/trylast, wrappers.
Never the order distributions happen to be installed in."""

from __future__ import annotations

import pytest

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
