"""The declared torch range is the tested range: the installed torch is inside it, the docs state it, and the
APIs that differ between releases are detected rather than assumed. The suite runs against another torch with
``bash scripts/dev.sh test --torch VERSION``."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from dist_support import SCRIPTS, needs_fsdp, run
from packaging.requirements import Requirement
from packaging.version import Version

import ember
from ember.testing import TinyClassifier, tiny_loaders

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def torch_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    return req


def test_the_installed_torch_is_in_the_declared_range() -> None:
    installed = Version(torch.__version__.split("+")[0])
    assert installed in torch_requirement().specifier, (installed, str(torch_requirement().specifier))


def test_the_install_docs_state_the_declared_and_tested_range() -> None:
    spec = {s.operator: s.version for s in torch_requirement().specifier}
    floor, below = spec[">="], spec["<"]
    for doc in ("README.md", "docs/install.md"):
        text = (ROOT / doc).read_text()
        assert f"torch>={floor},<{below}" in text, doc
    tested = [Version(v) for v in re.findall(r"^\| *(\d+\.\d+\.\d+) *\|", (ROOT / "docs/install.md").read_text(),
                                             re.M)]
    assert tested, "docs/install.md lists no tested torch versions"
    assert min(tested).release[:2] == Version(floor).release[:2]  # the floor is a tested release
    assert all(v in torch_requirement().specifier for v in tested)


def test_launch_config_options_are_detected() -> None:
    from torch.distributed.launcher.api import LaunchConfig

    from ember.launcher import _launch_config_has

    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    assert _launch_config_has("shutdown_timeout") == ("shutdown_timeout" in fields)
    assert _launch_config_has("nproc_per_node") and not _launch_config_has("no_such_option")


def test_fsdp_says_which_torch_it_needs_or_is_there() -> None:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:  # torch < 2.6: refused when the Trainer is built
        with pytest.raises(ember.ConfigurationError, match=r"strategy='fsdp' needs .*torch >= 2\.6"):
            ember.Trainer(accelerator="cpu", strategy="fsdp", devices=1, logger=False)
    else:  # built; what some releases cannot do on the CPU is refused when it shards (test_fsdp_availability.py)
        ember.Trainer(accelerator="cpu", strategy="fsdp", devices=1, logger=False)


class WithMetric(TinyClassifier):
    """Logs a torchmetrics accuracy from validation_step, and where evaluation ran."""

    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.acc = torchmetrics.classification.MulticlassAccuracy(num_classes=3, average="micro")
        self.modes: set[tuple[bool, bool]] = set()
        self.expected: list[tuple[int, int]] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        pred = self(x).argmax(-1)
        self.modes.add((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
        self.expected.append((int((pred == y).sum()), len(y)))
        self.acc(pred, y)
        self.log("val_metric", self.acc)


@pytest.mark.parametrize("strategy", ["single_device", "ddp"])
def test_a_torchmetrics_metric_in_self_log_under_each_strategy(strategy: str) -> None:
    """Under a gloo process group (here a DDP group of one) the metric's sync runs at compute time; gloo fills
    its outputs outside inference mode, so evaluation runs under no_grad there (torch 2.4 refused it)."""
    pytest.importorskip("torchmetrics")
    model = WithMetric()
    train, val = tiny_loaders(n=32)
    trainer = ember.Trainer(accelerator="cpu", strategy=strategy, devices=1, max_epochs=2, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                            num_sanity_val_steps=0)
    trainer.fit(model, train, val)
    right, total = map(sum, zip(*model.expected[-len(val):], strict=True))
    assert trainer.callback_metrics["val_metric"].item() == pytest.approx(right / total)
    assert model.modes == ({(False, False)} if strategy == "ddp" else {(False, True)})


def test_the_torch_profiler_runs_twice_in_one_process(tmp_path: Path) -> None:
    """Two profiled runs back to back, the second after the first stopped its profiler."""
    from ember.plugins.profilers.torch_profiler import TorchProfiler

    for attempt in range(2):
        profiler = TorchProfiler(dirpath=tmp_path / str(attempt), print_summary=False)
        trainer = ember.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                                profiler=profiler)
        trainer.fit(TinyClassifier(), tiny_loaders(n=64)[0])
        assert profiler.path is not None and Path(profiler.path).stat().st_size > 0


@pytest.mark.slow
@pytest.mark.extended  # for runs against another torch: tests/test_ddp.py and tests/test_fsdp.py hold it on this one
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp", marks=needs_fsdp)])
def test_two_processes_with_the_default_settings(tmp_path: Path, strategy: str) -> None:
    """Sanity check, checkpointing and logging on, as a user gets them (FSDP crashed here with inference
    tensors left by the sanity check)."""
    run([sys.executable, str(SCRIPTS / "defaults_job.py"), str(tmp_path), strategy], cwd=tmp_path, timeout=240)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["global_step"] == 8  # 64 samples, 2 ranks, batch 8: 4 steps an epoch
        assert r["sanity_batches"] == 2  # the default sanity check ran its 2 batches
        assert {"train_loss", "val_loss", "val_acc"} <= set(r["metrics"])
    assert ranks[0]["best"] and Path(ranks[0]["best"]).exists()
    # one run folder, the same on both ranks, holding the metrics and the checkpoints
    assert ranks[0]["log_dir"] == ranks[1]["log_dir"] == str(tmp_path / "ember_logs" / "version_0")
    assert ranks[0]["dirpath"] == ranks[1]["dirpath"] == str(tmp_path / "ember_logs" / "version_0" / "checkpoints")
    assert any(Path(ranks[0]["log_dir"]).glob("events.out.tfevents*"))
