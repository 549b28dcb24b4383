"""Lightning's behaviour of the progress bar, Timer and LearningRateMonitor, as Lightning's own tests of them
(callbacks/progress/test_tqdm_progress_bar.py, callbacks/test_timer.py, callbacks/test_lr_monitor.py) rely on."""

from __future__ import annotations

import logging
import time
from unittest import mock

import pytest
import torch

import ember
from ember.plugins.callbacks import LearningRateMonitor, Timer
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False}


# -- LearningRateMonitor -----------------------------------------------------------------------------------


class TwoAdams(TinyClassifier):
    """Two Adam optimizers stepped by hand in every batch; a StepLR each when ``schedulers``."""

    def __init__(self, schedulers: bool = False, names: tuple[str | None, str | None] = (None, None)) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.schedulers, self.names = schedulers, names

    def training_step(self, batch, batch_idx):
        for opt in self.optimizers():
            loss = super().training_step(batch, batch_idx)
            loss = loss["loss"] if isinstance(loss, dict) else loss
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def configure_optimizers(self):
        opts = [torch.optim.Adam(self.parameters(), lr=0.01), torch.optim.Adam(self.parameters(), lr=0.01)]
        if not self.schedulers:
            return opts
        return opts, [{"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "name": n}
                      for o, n in zip(opts, self.names, strict=True)]


def fit(model, callbacks, tmp_path, n=56, **kwargs):
    args = {**QUIET, "max_epochs": 2, "logger": "csv", "default_root_dir": tmp_path, **kwargs}
    trainer = ember.Trainer(callbacks=callbacks, **args)
    trainer.fit(model, tiny_loaders(n=n)[0])
    return trainer


def test_lr_monitor_needs_a_logger():
    with pytest.raises(ember.ConfigurationError, match="`Trainer` that has no logger"):
        ember.Trainer(**QUIET, logger=False, callbacks=[LearningRateMonitor()]).fit(
            TinyClassifier(), tiny_loaders(n=8)[0])


def test_lr_monitor_names_and_the_steps_whose_metrics_are_written(tmp_path):
    monitor = LearningRateMonitor(logging_interval="step")
    trainer = fit(TwoAdams(), [monitor], tmp_path, log_every_n_steps=2)  # 7 batches, 2 optimizer steps each
    assert list(monitor.lrs) == ["lr-Adam", "lr-Adam-1"]
    # every second batch that stepped is a logging step: 14 // 2
    assert trainer.global_step == 28 and [len(v) for v in monitor.lrs.values()] == [7, 7]


def test_lr_monitor_takes_a_scheduler_name_as_it_is(tmp_path):
    monitor = LearningRateMonitor(logging_interval="epoch")
    fit(TwoAdams(schedulers=True, names=("mine", None)), [monitor], tmp_path)
    assert list(monitor.lrs) == ["mine", "lr-Adam"]
    assert monitor.lrs == {"mine": [0.01, 0.01], "lr-Adam": [0.01, 0.01]}  # manual optimization: no scheduler step


def test_lr_monitor_momentum_warning_and_group_names(tmp_path):
    class Grouped(TinyClassifier):
        def configure_optimizers(self):
            first, *rest = self.parameters()
            return torch.optim.Adagrad([{"params": [first], "name": "head"}, {"params": rest}], lr=0.1)

    monitor = LearningRateMonitor(log_momentum=True)
    with pytest.warns(RuntimeWarning, match="optimizers do not have momentum."):
        fit(Grouped(), [monitor], tmp_path, n=16, max_epochs=1)
    assert list(monitor.lrs) == ["lr-Adagrad/head", "lr-Adagrad/pg2"]
    assert monitor.last_momentum_values == {"lr-Adagrad/head-momentum": 0.0, "lr-Adagrad/pg2-momentum": 0.0}


def test_lr_monitor_refuses_repeated_group_names(tmp_path):
    class Same(TinyClassifier):
        def configure_optimizers(self):
            first, *rest = self.parameters()
            return torch.optim.SGD([{"params": [first], "name": "a"}, {"params": rest, "name": "a"}], lr=0.1)

    with pytest.raises(ember.ConfigurationError, match="identical `name` values"):
        fit(Same(), [LearningRateMonitor()], tmp_path, n=8)


def test_lr_monitor_continues_a_single_group_as_pg1_when_groups_are_added(tmp_path):
    class Growing(TinyClassifier):
        def configure_optimizers(self):
            params = list(self.parameters())
            self.rest = params[1:]
            return torch.optim.SGD(params[:1], lr=0.1)

    class AddGroup(ember.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                trainer.optimizers[0].add_param_group({"params": pl_module.rest, "lr": 0.5})

    monitor = LearningRateMonitor(logging_interval="epoch")
    fit(Growing(), [AddGroup(), monitor], tmp_path, n=8, max_epochs=2)
    assert monitor.lrs == {"lr-SGD/pg1": [0.1, 0.1], "lr-SGD/pg2": [0.5]}


# -- Timer -------------------------------------------------------------------------------------------------


def test_timer_spent_budget_stops_the_fit_before_its_first_batch(caplog):
    trainer = ember.Trainer(max_epochs=3, logger=False, callbacks=[Timer(duration=0, interval="epoch")], **QUIET)
    with caplog.at_level(logging.INFO):
        trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
    assert (trainer.current_epoch, trainer.global_step) == (0, 0)
    assert "Time limit reached." in caplog.text and "Signaling Trainer to stop." in caplog.text


def test_timer_counts_the_sanity_check_as_validation():
    timer = Timer()
    trainer = ember.Trainer(max_steps=2, logger=False, callbacks=[timer],
                            **{**QUIET, "num_sanity_val_steps": 2})
    train, val = tiny_loaders(n=64)
    trainer.fit(TinyClassifier(), train, val)  # no validation run but the sanity check
    assert timer.time_elapsed("validate") > 0


def test_timer_clock_is_the_lightning_module_time():
    from ember.lightning.pytorch.callbacks import timer as lightning_timer

    start = time.monotonic()
    with mock.patch("ember.lightning.pytorch.callbacks.timer.time") as clock:
        clock.monotonic.return_value = start
        timer = Timer(duration=10)
        timer.on_train_start(trainer=mock.Mock(), pl_module=mock.Mock())  # Lightning's arguments, by name
        clock.monotonic.return_value = start + 3
        assert timer.time_elapsed() == 3 and timer.time_remaining() == 7
    assert lightning_timer.time is time
    import ember.plugins.callbacks.timer as ember_timer
    assert ember_timer.time is time


# -- TQDMProgressBar ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "env", "expected"), [
    (1, {}, 1), (1, {"COLAB_GPU": "1"}, 20), (19, {"COLAB_GPU": "1"}, 19), (0, {"TQDM_MINITERS": "1"}, 1),
    (1, {"TQDM_MINITERS": "2"}, 2), (3, {"TQDM_MINITERS": "2"}, 3),
])
def test_tqdm_refresh_rate_on_colab_and_from_tqdm_miniters(monkeypatch, asked, env, expected):
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    for name in ("COLAB_GPU", "TQDM_MINITERS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert TQDMProgressBar(refresh_rate=asked).refresh_rate == expected


def test_progress_bar_enable_disable_and_other_ranks(monkeypatch, capsys):
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    bar = TQDMProgressBar()
    assert bar.is_enabled and not bar.is_disabled
    bar.disable()

    def fit():
        trainer = ember.Trainer(callbacks=[bar], max_epochs=1, logger=False, **{**QUIET, "enable_progress_bar": True})
        trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
        return capsys.readouterr().out

    assert "Epoch 1/1" not in fit() and bar.is_disabled  # stays off through setup
    bar.enable()
    assert "Epoch 1/1" in fit()
    monkeypatch.setattr(ember.Trainer, "is_global_zero", property(lambda self: False))
    assert "Epoch" not in fit() and bar.is_disabled


def test_progress_bar_get_metrics_is_what_it_shows(tmp_path, capsys):
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    class Custom(TQDMProgressBar):
        def get_metrics(self, trainer, pl_module):
            items = super().get_metrics(trainer, pl_module)
            assert items.pop("v_num") == 0 and pl_module is trainer.lightning_module
            return {**items, "mine": 123}

    bar = Custom()
    trainer = ember.Trainer(callbacks=[bar], max_epochs=1, logger="csv", default_root_dir=tmp_path,
                            **{**QUIET, "enable_progress_bar": True})
    trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
    assert "mine=123" in capsys.readouterr().out
    assert TQDMProgressBar().get_metrics(trainer, trainer.lightning_module)["v_num"] == 0


def test_progress_bar_subclass_in_lightning_style_calls_the_base_hooks():
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar

    class Counting(TQDMProgressBar):
        train = val = 0

        def on_train_batch_end(self, *args):  # every argument, by position
            super().on_train_batch_end(*args)
            self.train += 1

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
            self.val += 1

    bar = Counting()
    trainer = ember.Trainer(callbacks=[bar], max_epochs=2, logger=False, **{**QUIET, "enable_progress_bar": True})
    trainer.fit(TinyClassifier(), *tiny_loaders(n=16))  # 2 training and 2 validation batches per epoch
    assert (bar.train, bar.val) == (4, 4)


# -- Lightning's TQDMProgressBar (ember.lightning) -------------------------------------------------------------


class Recording:
    """A stand-in for ``Tqdm`` recording its values of ``n``, ``total`` and its descriptions."""

    made: list[Recording] = []

    def __init__(self, desc: str = "", disable: bool = False, leave: bool = True, **_: object) -> None:
        self.desc, self.disable, self.leave = desc, disable, leave
        self.n, self.total, self.initial = 0, None, 0
        self.ns: list[int] = []
        self.descriptions: list[str] = []
        self.postfix: dict = {}
        self.closed = False
        Recording.made.append(self)

    def reset(self, total=None):
        self.n = 0
        self.ns.append(0)

    def refresh(self):
        self.ns.append(self.n)

    def set_description(self, desc):
        self.descriptions.append(desc)

    def set_postfix(self, values):
        self.postfix = dict(values)

    def write(self, text, **kwargs):
        print("written:", text, **kwargs)

    def close(self):
        self.closed = True


@pytest.fixture
def recording(monkeypatch):
    from ember.lightning.pytorch.callbacks.progress import tqdm_progress

    Recording.made = []
    monkeypatch.setattr(tqdm_progress, "Tqdm", Recording)
    return Recording


def test_lightning_bar_counts_per_stage_and_dataloader(recording):
    from ember.lightning.pytorch.callbacks import TQDMProgressBar

    bar = TQDMProgressBar(refresh_rate=3)
    trainer = ember.Trainer(callbacks=[bar], max_epochs=1, logger=False, limit_train_batches=5, limit_val_batches=2,
                            **{**QUIET, "enable_progress_bar": True, "num_sanity_val_steps": 2})
    train, val = tiny_loaders(n=64)
    trainer.fit(TinyClassifier(), train, val)
    assert bar.train_progress_bar.ns == [0, 3, 5] and bar.train_progress_bar.descriptions == ["Epoch 0"]
    assert bar.val_progress_bar.ns == [0, 2] and not bar.val_progress_bar.leave
    assert bar.val_progress_bar.descriptions == ["Validation DataLoader 0"]
    sanity = recording.made[0]
    assert sanity.desc == "Sanity Checking" and sanity.ns == [0, 2] and sanity.closed
    trainer.test(TinyClassifier(), [val, val])  # two dataloaders: the bar restarts for the second
    assert bar.test_progress_bar.descriptions == ["Testing DataLoader 0", "Testing DataLoader 1"]
    assert bar.test_progress_bar.ns == [0, 3, 6, 8, 0, 3, 6, 8] and bar.test_progress_bar.leave  # 8 batches each


def test_lightning_bar_leave_makes_a_bar_per_epoch(recording):
    from ember.lightning.pytorch.callbacks import TQDMProgressBar

    def bars(leave):
        recording.made = []
        trainer = ember.Trainer(callbacks=[TQDMProgressBar(leave=leave)], max_epochs=3, logger=False,
                                **{**QUIET, "enable_progress_bar": True})
        trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
        return [b for b in recording.made if b.desc == "Training"]

    assert len(bars(False)) == 1 and len(bars(True)) == 4  # one at the start, then one per epoch


def test_lightning_bar_pickles_and_off_at_refresh_rate_zero(capsys):
    import pickle

    from ember.lightning.pytorch.callbacks import TQDMProgressBar

    bar = TQDMProgressBar(refresh_rate=0)
    trainer = ember.Trainer(callbacks=[bar], max_epochs=1, logger=False, **{**QUIET, "enable_progress_bar": True})
    trainer.fit(TinyClassifier(), tiny_loaders(n=16)[0])
    assert bar.train_progress_bar.disable and capsys.readouterr().out == ""
    assert pickle.loads(pickle.dumps(bar)).refresh_rate == 0
    with pytest.raises(TypeError, match="predict_progress_bar is not made yet"):
        _ = bar.predict_progress_bar


def test_module_print_goes_through_the_lightning_bar(recording, capsys):
    from ember.lightning.pytorch.callbacks import TQDMProgressBar

    class Printing(TinyClassifier):
        def training_step(self, batch, batch_idx):
            self.print("step", batch_idx, sep="-")
            return super().training_step(batch, batch_idx)

    def fit(*callbacks):
        trainer = ember.Trainer(callbacks=list(callbacks), max_epochs=1, logger=False, limit_train_batches=1,
                                **{**QUIET, "enable_progress_bar": True})
        trainer.fit(Printing(), tiny_loaders(n=16)[0])
        return capsys.readouterr().out

    assert "written: step-0" in fit(TQDMProgressBar())  # tqdm.write, above the bars
    disabled = TQDMProgressBar()
    disabled.disable()
    assert "step-0" in fit(disabled) and "written" not in fit(disabled)
    assert "step-0" in fit()  # ember's default bar: print
