"""The progress-bar plugins: what they render, when they read metrics, and silence when off."""

from __future__ import annotations

import io
import re

import pytest

import ember
from ember.plugins.progress.rich_bar import RichProgressBar
from ember.plugins.progress.tqdm_bar import TQDMProgressBar
from ember.testing import TinyClassifier, tiny_loaders

ARGS = {"accelerator": "cpu",
        "max_epochs": 2, "num_sanity_val_steps": 0, "enable_model_summary": False, "logger": False}


class ProgModel(TinyClassifier):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("loss_shown", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        super().validation_step(batch, batch_idx)
        self.log("acc_shown", 0.5, prog_bar=True)


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")


@pytest.mark.parametrize("bar_class", [TQDMProgressBar, RichProgressBar])
def test_a_terminal_shows_epoch_count_rate_step_and_prog_bar_metrics(bar_class, tmp_path):
    out = io.StringIO()
    bar = bar_class(force_terminal=True, file=out, min_interval=0.0)
    trainer = ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **ARGS)
    trainer.fit(ProgModel(), *tiny_loaders())  # 8 batches per epoch
    text = plain(out.getvalue())
    assert trainer.progress_bar_callback is bar
    assert "Epoch 1/2" in text and "Epoch 2/2" in text
    assert "8/8" in text
    assert re.search(r"\d+(\.\d+)? ?it/s", text)
    assert "step=16" in text
    assert re.search(r"loss_shown=\d", text) and "acc_shown=0.5" in text
    assert "Validation" in text


def test_without_a_terminal_one_line_per_epoch(tmp_path, capsys):
    trainer = ember.Trainer(default_root_dir=tmp_path, **ARGS)  # the default bar; pytest's stdout is no tty
    trainer.fit(ProgModel(), *tiny_loaders())
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"Epoch 1/2: 8 batches in [\d.]+s \([\d.]+ it/s\), step=8, loss_shown=[\d.e-]+, "
                        r"acc_shown=0\.5", lines[0])
    assert lines[1].startswith("Epoch 2/2: 8 batches") and "step=16" in lines[1]


def test_disabled_is_silent(tmp_path, capsys):
    trainer = ember.Trainer(default_root_dir=tmp_path, **{**ARGS, "enable_progress_bar": False})
    trainer.fit(ProgModel(), *tiny_loaders())
    trainer.validate(dataloaders=tiny_loaders()[1], verbose=False, ckpt_path="best")
    assert capsys.readouterr().out == ""
    assert trainer.progress_bar_callback is None
    assert not any(ident.startswith("progress.") for ident, _ in trainer.extra_plugins)


def test_selection_by_name_replaces_the_default_and_conflicts_are_refused():
    trainer = ember.Trainer(accelerator="cpu", callbacks=["progress.rich"])
    assert isinstance(trainer.progress_bar_callback, RichProgressBar)
    assert [i for i, _ in trainer.extra_plugins if i.startswith("progress.")] == ["progress.rich"]
    assert isinstance(ember.Trainer(accelerator="cpu").progress_bar_callback, TQDMProgressBar)
    with pytest.raises(ember.ConfigurationError, match="enable_progress_bar=False"):
        ember.Trainer(accelerator="cpu", enable_progress_bar=False, callbacks=[TQDMProgressBar()])


def test_metrics_are_read_only_when_the_bar_renders(tmp_path):
    class Counting(TQDMProgressBar):
        reads = 0

        def metrics(self, trainer):
            Counting.reads += 1
            return super().metrics(trainer)

    bar = Counting(refresh_rate=4, min_interval=0.0, force_terminal=True, file=io.StringIO())
    train, _ = tiny_loaders(n=80, batch_size=8)  # 10 batches: renders after 4, 8 and the last
    ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **{**ARGS, "max_epochs": 1}).fit(ProgModel(), train)
    assert Counting.reads == 3 + 1  # three renders, and the final one when the bar closes


def test_a_terminal_bar_renders_only_when_its_interval_has_passed(tmp_path):
    class Counting(TQDMProgressBar):
        renders: list[int] = []

        def _render(self, kind, bar, n, postfix):
            if kind == "train":
                Counting.renders.append(n)
            super()._render(kind, bar, n, postfix)

    out = io.StringIO()
    bar = Counting(min_interval=3600.0, force_terminal=True, file=out)  # counted every batch, drawn at the end
    train, _ = tiny_loaders(n=80, batch_size=8)  # 10 batches
    ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **{**ARGS, "max_epochs": 2}).fit(ProgModel(), train)
    assert Counting.renders == [10, 10]  # the last batch of each epoch
    assert "10/10" in plain(out.getvalue())


@pytest.mark.parametrize("slow", [False, True])
def test_a_validation_bar_is_made_only_once_it_is_due(slow, tmp_path, monkeypatch):
    """A validation bar within a fit is erased when it ends: it is made (and drawn) only when validation takes
    longer than min_interval, with the time since validation started."""
    import time

    from ember.plugins.progress import tqdm_bar

    made: list[str] = []
    real = TQDMProgressBar._tqdm

    def counted(self, total, description, leave):
        made.append(description)
        return real(self, total, description, leave)

    class Slow(ProgModel):
        def validation_step(self, batch, batch_idx):
            if slow:
                time.sleep(0.03)
            super().validation_step(batch, batch_idx)

    monkeypatch.setattr(tqdm_bar.TQDMProgressBar, "_tqdm", counted)
    out = io.StringIO()
    bar = TQDMProgressBar(force_terminal=True, file=out, min_interval=0.05 if slow else 3600.0)
    ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **{**ARGS, "max_epochs": 1}).fit(
        Slow(), *tiny_loaders())
    assert made.count("Epoch 1/1") == 1
    assert made.count("Validation") == (1 if slow else 0)
    assert ("Validation" in plain(out.getvalue())) is slow
    assert not bar._live


def test_the_training_bar_is_made_once_per_fit_and_prints_what_a_bar_per_epoch_prints(tmp_path, monkeypatch):
    """Each epoch's training line stays on screen; the closed bar is reopened for the next epoch instead of making
    a new tqdm bar, and the terminal gets the same text as with a new bar per epoch (times and rates aside)."""
    from ember.plugins.progress import tqdm_bar

    made: list[str] = []
    real = TQDMProgressBar._tqdm

    def counted(self, total, description, leave):
        if description.startswith("Epoch"):
            made.append(description)
        return real(self, total, description, leave)

    class NewBarEachEpoch(TQDMProgressBar):
        def _open(self, kind, total, description, leave):
            self._closed_train = None
            return super()._open(kind, total, description, leave)

    def fit(bar_class):
        out = io.StringIO()
        bar = bar_class(force_terminal=True, file=out, min_interval=0.0)
        ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **{**ARGS, "max_epochs": 3}).fit(
            ProgModel(), *tiny_loaders())
        assert bar._closed_train is None  # let go at the end of the fit
        # times, rates and the (random) metrics differ from run to run
        text = re.sub(r"\d+:\d+|[\d.]+(s/it|it/s)|\?it/s|=[-\d.e]+", "#", out.getvalue())
        return re.sub(r" +(?=[\r\n\x1b])", "", text)  # the padding over a longer line drawn before

    monkeypatch.setattr(tqdm_bar.TQDMProgressBar, "_tqdm", counted)
    reused = fit(TQDMProgressBar)
    assert made == ["Epoch 1/3"]
    made.clear()
    assert fit(NewBarEachEpoch) == reused
    assert made == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
    for epoch in (1, 2, 3):  # the last render of each epoch stays, ended by a new line
        assert re.search(rf"Epoch {epoch}/3: 100%\|[^\r\n]*8/8[^\r\n]*\]\n", reused)


def test_a_terminal_bar_pickled_between_fits_serves_the_next_fit(tmp_path):
    """A Trainer is pickled between fits (as Lightning's is): its tqdm bar drops the terminal bar it keeps for
    reuse, and the copy draws the next fit's epochs with a bar of its own."""
    import pickle

    bar = TQDMProgressBar(force_terminal=True, file=io.StringIO(), min_interval=0.0)
    ember.Trainer(callbacks=[bar], default_root_dir=tmp_path, **ARGS).fit(ProgModel(), *tiny_loaders())
    copy = pickle.loads(pickle.dumps(bar))
    copy._file = out = io.StringIO()
    ember.Trainer(callbacks=[copy], default_root_dir=tmp_path, **ARGS).fit(ProgModel(), *tiny_loaders())
    assert "Epoch 2/2: 100%" in plain(out.getvalue())
