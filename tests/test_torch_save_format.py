"""ember's writer of ``torch.save``'s format (``ember.plugins._shared.torch_save``): the same bytes as
``torch.save`` for what it writes itself, and ``torch.save``'s own output for everything it hands back."""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Any

import pytest
import torch

from ember.plugins._shared import torch_save


def torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def trained_checkpoint() -> dict[str, Any]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.AdamW(net.parameters())
    net(torch.randn(4, 8)).sum().backward()
    opt.step()
    return {"state_dict": net.state_dict(), "optimizer_states": [opt.state_dict()],
            "lr_schedulers": [], "epoch": 3, "global_step": 12, "rng": {"torch": torch.get_rng_state()},
            "plugins": {"callback.x": {"best": 0.5, "path": "a/b.ckpt", "flags": (True, None)}}}


CASES: dict[str, Any] = {
    "checkpoint": trained_checkpoint(),
    "views of one storage": (lambda base: {"a": base, "row": base[1], "col": base[:, 2], "t": base.t()})(
        torch.arange(12.0).reshape(3, 4)),
    "one tensor twice": (lambda t: [t, t, {"again": t}])(torch.ones(5)),
    "dtypes": {str(d): torch.ones(3, dtype=d) for d in (torch.float16, torch.bfloat16, torch.float64, torch.int8,
                                                       torch.int64, torch.uint8, torch.bool, torch.complex64)},
    "empty and scalar": [torch.empty(0), torch.zeros(()), torch.empty(0, 3)],
    "requires grad": torch.ones(2, requires_grad=True),
    "parameter": torch.nn.Parameter(torch.ones(2, 2)),
    "state_dict metadata": torch.nn.Linear(2, 2).state_dict(),
    "nested ordered dicts": OrderedDict(a=OrderedDict(b=torch.ones(1)), c=[]),
    "no tensors": {"a": [1, 2.5, "x", None, (True, False)], "b": b"bytes"},
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_bytes_as_torch_save(name: str) -> None:
    obj = CASES[name]
    data = bytes(torch_save.to_bytes(obj))
    assert data == torch_bytes(obj)
    loaded = torch.load(io.BytesIO(data), weights_only=True)
    assert torch_bytes(loaded) == torch_bytes(obj)


def test_writes_to_a_file_object(tmp_path: Any) -> None:
    obj = CASES["checkpoint"]
    path = tmp_path / "x.ckpt"
    with open(path, "wb") as f:
        torch_save.save(obj, f)
    assert path.read_bytes() == torch_bytes(obj)


UNSUPPORTED: dict[str, Any] = {
    "sparse": {"s": torch.eye(3).to_sparse()},
    "conjugate bit": torch.ones(2, dtype=torch.complex64).conj(),
    "a storage on its own": torch.ones(3).untyped_storage(),
    "untyped-storage dtype": torch.ones(3, dtype=torch.uint16),
    "meta": {"m": torch.ones(3, device="meta")},
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_what_it_does_not_write_goes_to_torch_save(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: (calls.append(obj), real(obj, f)))
    obj = UNSUPPORTED[name]
    buffer = io.BytesIO()
    torch_save.save(obj, buffer)
    assert len(calls) == 1
    monkeypatch.setattr(torch, "save", real)
    assert buffer.getvalue() == torch_bytes(obj)


def test_tensor_with_python_attributes_goes_to_torch_save(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.ones(2)
    t.note = "kept"  # type: ignore[attr-defined]
    calls = []
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: (calls.append(obj), real(obj, f)))
    torch_save.to_bytes({"t": t})
    assert len(calls) == 1


def test_tensor_with_a_backward_hook_goes_to_torch_save(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.ones(2, requires_grad=True)
    t.register_hook(lambda grad: grad)
    calls = []
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: (calls.append(obj), real(obj, f)))
    with pytest.warns(UserWarning, match="will not be serialized"):
        torch_save.to_bytes([t])
    assert len(calls) == 1


def test_two_dtypes_over_one_storage_fail_as_in_torch_save() -> None:
    base = torch.zeros(4)
    with pytest.raises(RuntimeError, match="different types"):
        torch_save.to_bytes([base, base.view(torch.int32)])
