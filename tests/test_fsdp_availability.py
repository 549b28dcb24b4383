"""strategy.fsdp on a torch whose FSDP2 cannot run on the CPU (2.6: its CPU stream records no events) is refused
with an error that says so, before any process group is made; elsewhere nothing is refused."""

from __future__ import annotations

import pytest
import torch

from ember.plugins.strategies.fsdp import device_unsupported


def test_the_cpu_is_refused_only_where_its_stream_cannot_record_events(monkeypatch: pytest.MonkeyPatch) -> None:
    assert device_unsupported("cuda") is None
    if callable(getattr(torch.cpu.Stream, "record_event", None)):
        assert device_unsupported("cpu") is None
        monkeypatch.delattr(torch.cpu.Stream, "record_event")  # as torch 2.6's
    message = device_unsupported("cpu")
    assert message is not None
    assert "needs torch >= 2.7" in message and torch.__version__ in message and "strategy='ddp'" in message
