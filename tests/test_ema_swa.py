"""EMA and SWA callbacks: the average torch's swa_utils computes, validation on it, exact resume."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader

import ember
from ember.core.errors import ConfigurationError
from ember.core.hooks.discovery import discover
from ember.plugins.callbacks.ema import EMA
from ember.plugins.callbacks.swa import SWA
from ember.testing import TinyClassifier, tiny_dataset

QUIET = {"num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False, "accelerator": "cpu"}


class Crash:
    """Asks for a checkpoint after global batch ``at`` (written at the next safe point) and fails two batches
    later, like a killed job."""

    def __init__(self, path: Path, at: int) -> None:
        self.path, self.at, self.seen = path, at, 0

    def on_train_batch_end(self, trainer: Any) -> None:
        self.seen += 1
        if self.seen == self.at:
            trainer.save_checkpoint(self.path)
        if self.seen == self.at + 2:
            raise RuntimeError("crash")


def loader() -> DataLoader:
    return DataLoader(tiny_dataset(40), batch_size=4, shuffle=True)


def fit(callback: Any, epochs: int = 4, extra: tuple = (), ckpt: str | None = None, **kwargs: Any) -> TinyClassifier:
    ember.seed_everything(3)
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=epochs, callbacks=[callback, *extra], **{**QUIET, **kwargs})
    trainer.fit(model, loader(), ckpt_path=ckpt)
    return model


def test_selected_by_name() -> None:
    assert {"callback.ema", "callback.swa"} <= set(discover().plugins)
    ember.seed_everything(3)
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=1, callbacks=["ema"], **QUIET)
    trainer.fit(model, loader())
    ema = next(p for _, p in trainer.extra_plugins if isinstance(p, EMA))
    assert ema.n_averaged == 10 and torch.equal(model.net[0].weight, ema.averaged[0])


def test_ema_equals_torch_averaged_model() -> None:
    """Same steps by hand with torch's AveragedModel: the callback's average is the same tensors."""
    ema = EMA(decay=0.9, apply_at_end=False)
    model = fit(ema, epochs=2)
    ember.seed_everything(3)
    ref = TinyClassifier()
    avg = AveragedModel(ref, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    opt = ref.configure_optimizers()
    for _ in range(2):
        for x, y in loader():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(ref(x), y).backward()
            opt.step()
            avg.update_parameters(ref)
    assert ema.n_averaged == 20
    assert all(torch.equal(a, b) for a, b in zip(ema.averaged, avg.module.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))


def test_ema_applied_at_end_and_validation_uses_average() -> None:
    seen: list[torch.Tensor] = []

    class Probe(TinyClassifier):
        def on_validation_epoch_start(self) -> None:
            seen.append(self.net[0].weight.detach().clone())

    ember.seed_everything(3)
    model, ema = Probe(), EMA(decay=0.5)
    trainer = ember.Trainer(max_epochs=2, callbacks=[ema], **QUIET)
    trainer.fit(model, loader(), DataLoader(tiny_dataset(8), batch_size=4))
    assert ema.averaged is not None
    assert torch.equal(model.net[0].weight, ema.averaged[0])  # applied at the end
    assert torch.equal(seen[-1], ema.averaged[0])  # the last validation ran on the average
    assert not torch.equal(ema._tensors(model)[0], ema.state_dict()["training_weights"][0])


@pytest.mark.parametrize("make", [lambda: EMA(decay=0.8, every_n_steps=2, start_step=3),
                                  lambda: SWA(swa_lrs=0.05, swa_epoch_start=1, annealing_epochs=2)],
                         ids=["ema", "swa"])
@pytest.mark.parametrize("at", [15, 20], ids=["mid-epoch", "epoch-end"])
def test_resume_gives_bitwise_equal_average(tmp_path: Path, make: Any, at: int) -> None:
    straight = make()
    ref = fit(straight)
    ckpt = tmp_path / "crash.ckpt"
    with pytest.raises(RuntimeError, match="crash"):
        fit(make(), extra=(Crash(ckpt, at),))
    resumed_cb = make()
    resumed = fit(resumed_cb, ckpt=str(ckpt))
    assert resumed_cb.n_averaged == straight.n_averaged > 0
    assert all(torch.equal(a, b) for a, b in zip(resumed_cb.averaged, straight.averaged, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), ref.parameters(), strict=True))


def test_checkpoint_written_after_fit_resumes_training_weights(tmp_path: Path) -> None:
    """With the average applied at the end, the checkpoint still carries the training weights."""
    ref = fit(EMA(decay=0.7), epochs=3)
    ema = EMA(decay=0.7)
    ember.seed_everything(3)
    model = TinyClassifier()
    trainer = ember.Trainer(max_epochs=2, callbacks=[ema], **QUIET)
    trainer.fit(model, loader())
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    again = fit(EMA(decay=0.7), epochs=3, ckpt=str(tmp_path / "after.ckpt"))
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), ref.parameters(), strict=True))


class BN(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.net.insert(1, torch.nn.BatchNorm1d(16))


def test_swa_with_batchnorm_resumes_from_a_checkpoint_written_after_fit(tmp_path: Path) -> None:
    """After fit the module holds the average and recomputed BatchNorm statistics; the checkpoint still holds
    the training weights and statistics, so the resumed fit ends bit for bit like the straight one."""

    def run(epochs: int, ckpt: str | None = None, save: Path | None = None) -> BN:
        ember.seed_everything(3)
        model = BN()
        trainer = ember.Trainer(max_epochs=epochs, callbacks=[SWA(swa_lrs=0.05, swa_epoch_start=1)], **QUIET)
        trainer.fit(model, loader(), ckpt_path=ckpt)
        if save is not None:
            trainer.save_checkpoint(save)
        return model

    straight = run(3)
    run(2, save=tmp_path / "after.ckpt")
    resumed = run(3, ckpt=str(tmp_path / "after.ckpt"))
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_swa_averages_epochs_and_anneals_lr() -> None:
    swa = SWA(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=1, apply_at_end=False)
    lrs: list[float] = []

    class Watch:
        def on_train_epoch_end(self, trainer: Any) -> None:
            lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    fit(swa, epochs=4, extra=(Watch(),))
    assert swa.n_averaged == 2
    # SWALR is built when averaging begins and steps at each later epoch start (torch's documented order)
    assert lrs == [0.1, 0.1, 0.1, pytest.approx(0.01)]


def test_swa_recomputes_batchnorm_statistics() -> None:
    ember.seed_everything(3)
    model, swa = BN(), SWA(swa_lrs=0.05, swa_epoch_start=1)
    ember.Trainer(max_epochs=3, callbacks=[swa], **QUIET).fit(model, loader())
    bn = model.net[1]
    with torch.no_grad():  # the statistics of the averaged weights' activations over the training data
        h = model.net[0](tiny_dataset(40).tensors[0])
    assert torch.allclose(bn.running_mean, h.mean(0), atol=1e-5)


@pytest.mark.parametrize(("make", "match"), [(lambda: EMA(decay=1.5), "decay"),
                                             (lambda: EMA(every_n_steps=0), "every_n_steps"),
                                             (lambda: SWA(annealing_strategy="cosine"), "annealing_strategy"),
                                             (lambda: SWA(swa_epoch_start=1.5), "swa_epoch_start")])
def test_bad_arguments_are_named(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "weight-averaging.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "weight_averaging_doc"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name} (python block {i + 1})", "exec"), namespace)
    assert namespace["ema"].n_averaged == 24
