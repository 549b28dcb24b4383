"""``torch.compile``: a compiled module trains under ember, its hooks fire outside the compiled region, and
ember causes no graph breaks (the compiled step captures exactly what the raw compiled loop captures)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders  # FAST_TRAINER_ARGS: accelerator="cpu"

pytestmark = pytest.mark.slow  # compiling on the CPU takes seconds


@pytest.fixture
def dynamo() -> Any:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


class HookedClassifier(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.events.append(f"start:{batch_idx}:{torch.compiler.is_compiling()}")

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.events.append(f"before_backward:{torch.compiler.is_compiling()}")

    def on_train_batch_end(self, batch_idx: int) -> None:
        self.events.append(f"end:{batch_idx}:{torch.compiler.is_compiling()}")


def _graphs(counters: Any) -> tuple[int, dict[str, int]]:
    return counters["stats"]["unique_graphs"], dict(counters["graph_break"])


def test_compiled_module_trains_hooks_outside_no_graph_breaks(dynamo: Any) -> None:
    train, _ = tiny_loaders(n=32, batch_size=8)
    torch.manual_seed(0)
    raw = TinyClassifier()
    raw.compile()
    opt = torch.optim.SGD(raw.parameters(), lr=0.1)
    for x, y in train:
        loss = torch.nn.functional.cross_entropy(raw(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    raw_graphs, raw_breaks = _graphs(dynamo)
    assert raw_graphs >= 1 and raw_breaks == {}

    torch._dynamo.reset()
    dynamo.clear()
    torch.manual_seed(0)
    model = HookedClassifier()
    model.compile()  # compiles the module's forward in place: training_step's self(x) runs compiled
    before = [p.detach().clone() for p in model.parameters()]
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    trainer.fit(model, train)
    graphs, breaks = _graphs(dynamo)
    assert breaks == {}, f"graph breaks under ember: {breaks}"
    assert graphs == raw_graphs  # ember adds nothing to what is captured
    assert trainer.global_step == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    assert model.events[:3] == ["start:0:False", "before_backward:False", "end:0:False"]
    assert len(model.events) == 12


def test_compiled_submodule_trains_and_matches_the_raw_compiled_loop(dynamo: Any) -> None:
    train, _ = tiny_loaders(n=32, batch_size=8)

    torch.manual_seed(0)
    raw = TinyClassifier()
    raw.net = torch.compile(raw.net)
    opt = torch.optim.SGD(raw.parameters(), lr=raw.lr)
    for x, y in train:
        loss = torch.nn.functional.cross_entropy(raw(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    torch.manual_seed(0)
    model = TinyClassifier()
    model.net = torch.compile(model.net)
    ember.Trainer(**FAST_TRAINER_ARGS).fit(model, train)
    assert dict(dynamo["graph_break"]) == {}
    for a, b in zip(raw.parameters(), model.parameters()):
        torch.testing.assert_close(a, b)


def test_a_torch_compile_wrapper_is_refused_with_the_fix() -> None:
    with pytest.raises(ember.ConfigurationError, match=r"model\.compile\(\)"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(torch.compile(TinyClassifier()), tiny_loaders(n=8)[0])
