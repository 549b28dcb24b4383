"""Export helpers: each exported model is loaded back and run, and its outputs compared with the module's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.errors import ConfigurationError
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"max_epochs": 1, "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False, "enable_checkpointing": False, "accelerator": "cpu"}
#: torch 2.13 deprecates TorchScript; the helper still offers it for runtimes that load TorchScript.
JIT_DEPRECATED = pytest.mark.filterwarnings("ignore:`torch.jit.*is deprecated:DeprecationWarning")


class WithExample(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.randn(2, 8)


@pytest.fixture
def trained() -> WithExample:
    """A module trained by a Trainer (so it is attached to one) and left in training mode."""
    ember.seed_everything(0)
    model = WithExample()
    ember.Trainer(**QUIET).fit(model, DataLoader(tiny_dataset(32), batch_size=8))
    model.train()
    return model


def expected(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


@JIT_DEPRECATED
@pytest.mark.parametrize("method", ["script", "trace"])
def test_torchscript_file_loads_and_matches(trained: WithExample, tmp_path: Path, method: str) -> None:
    path = tmp_path / f"{method}.pt"
    trained.to_torchscript(path, method=method)
    assert trained.training  # the mode it was in is put back
    x = torch.randn(5, 8)
    loaded = torch.jit.load(str(path))
    assert torch.equal(loaded(x), expected(trained, x))


@JIT_DEPRECATED
def test_torchscript_of_an_unattached_module() -> None:
    model = TinyClassifier()  # never trained: scripting must not ask for its trainer
    x = torch.randn(3, 8)
    assert torch.equal(model.to_torchscript()(x), expected(model, x))


def test_torch_export_round_trip(trained: WithExample, tmp_path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=64)
    program = trained.export(file_path=tmp_path / "model.pt2", dynamic_shapes=({0: batch},))
    assert isinstance(program, torch.export.ExportedProgram) and trained.training
    loaded = torch.export.load(str(tmp_path / "model.pt2")).module()
    x = torch.randn(7, 8)  # another batch size than the example's
    assert torch.equal(loaded(x), expected(trained, x))


@pytest.mark.slow
def test_onnx_runs_in_onnxruntime(trained: WithExample, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    path = trained.to_onnx(tmp_path / "model.onnx", torch.randn(4, 8), verbose=False, input_names=["x"])
    assert trained.training
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(4, 8)
    (out,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), expected(trained, x), rtol=1e-5, atol=1e-6)


def test_a_missing_example_input_is_explained() -> None:
    with pytest.raises(ConfigurationError, match="example_input_array"):
        TinyClassifier().export()
    with pytest.raises(ConfigurationError, match="'script' or 'trace'"):
        TinyClassifier().to_torchscript(method="compile")


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    page = Path(__file__).resolve().parents[1] / "docs" / "export.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (python block {i + 1})", "exec"), {"__name__": "export_doc"})
