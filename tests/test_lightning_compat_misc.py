"""Lightning's behaviour where its own tests of the optimizer step, ``self.log`` and the loggers found ember
different (trainer/optimization/, trainer/logging_/, core/test_lightning_optimizer.py, loggers/)."""

from __future__ import annotations

import pytest
import torch

import ember
from ember.testing import TinyClassifier, tiny_loaders

QUIET = {"accelerator": "cpu", "num_sanity_val_steps": 0, "logger": False, "enable_progress_bar": False,
         "enable_model_summary": False, "enable_checkpointing": False}


# -- optimizers that evaluate the loss themselves (LBFGS) -----------------------------------------------------


class Counting(TinyClassifier):
    """Counts training steps and ``on_before_optimizer_step`` calls; ``opt`` makes the optimizer."""

    def __init__(self, opt=lambda params: torch.optim.LBFGS(params, lr=0.1, max_iter=3), manual: bool = False):
        super().__init__()
        self.make, self.steps, self.before = opt, 0, 0
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        self.steps += 1
        out = super().training_step(batch, batch_idx)
        if self.automatic_optimization:
            return out
        opt = self.optimizers()
        loss = out["loss"] if isinstance(out, dict) else out

        def closure():
            opt.zero_grad()
            self.manual_backward(super(Counting, self).training_step(batch, batch_idx)["loss"]
                                 if isinstance(out, dict) else super(Counting, self).training_step(batch, batch_idx))
            return loss
        opt.step(closure=closure)

    def on_before_optimizer_step(self, optimizer):
        self.before += 1

    def configure_optimizers(self):
        return self.make(self.parameters())


def test_lbfgs_in_automatic_optimization_evaluates_the_closure_itself():
    torch.manual_seed(0)
    model = Counting()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = ember.Trainer(max_steps=2, **QUIET)
    trainer.fit(model, tiny_loaders()[0])
    assert trainer.global_step == 2
    # LBFGS calls the closure up to max_iter (+1 for its line search) times per step; each call is a training
    # step and is followed by on_before_optimizer_step, as in Lightning
    assert model.steps > 2 and model.before == model.steps
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_lbfgs_under_accumulation_runs_one_backward_per_batch_outside_the_step(monkeypatch):
    calls = []
    original = torch.Tensor.backward
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: (calls.append(1), original(self, *a, **k)))
    model = Counting(opt=lambda params: torch.optim.LBFGS(params, lr=0.1, max_iter=1))
    ember.Trainer(max_steps=2, accumulate_grad_batches=2, **QUIET).fit(model, tiny_loaders()[0])
    assert len(calls) == model.steps == 4  # max_iter=1: one evaluation per step, one plain batch per window


def test_lbfgs_stepped_by_hand_gets_the_closure():
    model = Counting(manual=True)
    trainer = ember.Trainer(max_steps=2, **QUIET)
    trainer.fit(model, tiny_loaders()[0])
    assert trainer.global_step == 2 and model.before > 2


def test_lbfgs_under_16_mixed_says_they_do_not_combine():
    with pytest.raises(ember.ConfigurationError, match="AMP and the LBFGS optimizer are not compatible"):
        ember.Trainer(max_steps=1, precision="16-mixed", **QUIET).fit(Counting(), tiny_loaders()[0])


# -- self.log ----------------------------------------------------------------------------------------------------


class Recorder:
    """A logger that keeps every ``log_metrics`` call."""

    identity = "logger.recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[dict, int]] = []

    @ember.hookimpl
    def log_metrics(self, metrics, step):
        self.calls.append(({k: float(v) for k, v in metrics.items()}, step))

    @ember.hookimpl
    def log_hyperparams(self, params):
        pass


def test_a_value_logged_in_on_train_start_is_a_value_of_the_first_epoch():
    class Model(TinyClassifier):
        def on_train_start(self):
            self.log("foo", 123)

    logger = Recorder()
    trainer = ember.Trainer(**{**QUIET, "logger": logger}, max_epochs=2, limit_train_batches=1, log_every_n_steps=1)
    trainer.fit(Model(), tiny_loaders()[0])
    # once, at the first epoch's end; not again at the second (it was not logged in that epoch)
    assert [m for m, _ in logger.calls if "foo" in m] == [{"foo": 123.0, "epoch": 0.0}]
    assert float(trainer.callback_metrics["foo"]) == 123.0


def test_callbacks_log_with_self_log_in_their_hooks():
    from ember.lightning.pytorch import Callback

    class Logging(Callback):
        def on_train_start(self, trainer, pl_module):
            self.log("start", 1)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.log_dict({"batch": 3})

        def on_train_epoch_end(self, trainer, pl_module):
            self.log("epoch_end", 5)

    trainer = ember.Trainer(callbacks=[Logging()], max_epochs=1, limit_train_batches=2, **QUIET)
    trainer.fit(TinyClassifier(), tiny_loaders()[0])
    assert {k: float(v) for k, v in trainer.callback_metrics.items() if "loss" not in k} == \
        {"start": 1.0, "batch": 3.0, "epoch_end": 5.0}
    with pytest.raises(RuntimeError, match="outside a running trainer"):
        Logging().log("x", 1)


def test_logging_neither_per_step_nor_per_epoch_is_a_configuration_error():
    class Model(TinyClassifier):
        def training_step(self, batch, batch_idx):
            self.log("x", 1.0, on_step=False, on_epoch=False)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ember.ConfigurationError, match="is not useful"):
        ember.Trainer(max_steps=1, **QUIET).fit(Model(), tiny_loaders()[0])


def test_an_epoch_value_is_written_to_the_loggers_only_in_epochs_that_logged_it():
    class Model(TinyClassifier):
        def on_train_epoch_start(self):
            if self.current_epoch == 0:
                self.log("first_only", 7.0)

        def training_step(self, batch, batch_idx):
            self.log("every", 1.0, on_step=False, on_epoch=True)
            return super().training_step(batch, batch_idx)

    logger = Recorder()
    trainer = ember.Trainer(**{**QUIET, "logger": logger}, max_epochs=3, limit_train_batches=2, log_every_n_steps=50)
    trainer.fit(Model(), tiny_loaders()[0])
    assert [sorted(m) for m, _ in logger.calls] == [["epoch", "every", "first_only"], ["epoch", "every"],
                                                    ["epoch", "every"]]
    assert float(trainer.callback_metrics["first_only"]) == 7.0  # callback_metrics keeps it, as in Lightning


# -- the default progress bar of a Trainer taken through Lightning's names ----------------------------------------


def test_a_trainer_taken_through_lightning_names_has_lightnings_progress_bar():
    from ember.lightning.pytorch.callbacks import TQDMProgressBar
    from ember.plugins.progress.tqdm_bar import TQDMProgressBar as EmberBar

    args = {"accelerator": "cpu", "logger": False, "enable_checkpointing": False}
    assert type(ember.Trainer(**args).progress_bar_callback) is EmberBar  # ember's names: ember's bar
    import ember.lightning.pytorch as pl

    bar = pl.Trainer(**args).progress_bar_callback  # Lightning's names: Lightning's bar, from then on
    assert type(bar) is TQDMProgressBar and bar.identity == "progress.tqdm"
    assert type(ember.Trainer(**args).progress_bar_callback) is TQDMProgressBar
    assert pl.Trainer(**args, enable_progress_bar=False).progress_bar_callback is None
    mine = TQDMProgressBar(refresh_rate=5)
    assert pl.Trainer(**args, callbacks=[mine]).progress_bar_callback is mine
    from ember.lightning.pytorch.trainer.trainer import Trainer

    assert Trainer is ember.Trainer


def test_lightnings_bar_counts_the_validation_batches_of_epochs_that_validate():
    import ember.lightning.pytorch as pl
    from ember.lightning.pytorch.demos.boring_classes import BoringModel

    class Model(BoringModel):
        totals: list = []

        def on_train_epoch_end(self):
            self.totals.append(self.trainer.progress_bar_callback.total_val_batches)

    trainer = pl.Trainer(accelerator="cpu", max_epochs=4, num_sanity_val_steps=0, limit_train_batches=2,
                         limit_val_batches=2, check_val_every_n_epoch=2, logger=False, enable_checkpointing=False)
    trainer.fit(Model())
    assert Model.totals == [0, 2, 0, 2]
    assert trainer.progress_bar_callback.train_progress_bar.n == 2


def test_two_progress_bars_or_a_bar_with_the_bar_switched_off_are_refused():
    from ember.lightning.pytorch.callbacks import TQDMProgressBar

    with pytest.raises(ember.ConfigurationError, match=r"^You added multiple progress bar callbacks"):
        ember.Trainer(accelerator="cpu", callbacks=[TQDMProgressBar(), TQDMProgressBar()])
    with pytest.raises(ember.ConfigurationError, match=r"enable_progress_bar=False` but found `TQDMProgressBar"):
        ember.Trainer(accelerator="cpu", callbacks=[TQDMProgressBar()], enable_progress_bar=False)


class KeywordSGD(torch.optim.SGD):
    """SGD whose ``step`` takes an extra keyword, and records what it was given."""

    seen: list = []

    def step(self, closure=None, scale=1.0):
        KeywordSGD.seen.append((closure is not None, scale))
        return super().step(closure)


def test_opt_step_passes_the_closure_and_keywords_on_to_the_optimizer():
    class Model(TinyClassifier):
        automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()

            def closure():
                loss = super(Model, self).training_step(batch, batch_idx)
                loss = loss["loss"] if isinstance(loss, dict) else loss
                opt.zero_grad()
                self.manual_backward(loss)
                return loss

            out = opt.step(closure=closure, scale=0.5)
            assert isinstance(out, torch.Tensor)  # the closure's loss, as the optimizer's step returns it
            opt.step(closure=closure)

        def configure_optimizers(self):
            return KeywordSGD(self.parameters(), lr=0.1)

    KeywordSGD.seen = []
    trainer = ember.Trainer(max_epochs=1, limit_train_batches=2, **QUIET)
    trainer.fit(Model(), tiny_loaders()[0])
    assert KeywordSGD.seen == [(True, 0.5), (True, 1.0)] * 2 and trainer.global_step == 4


def test_automatic_optimization_refuses_optimizer_idx_and_several_optimizers_with_a_runtime_error():
    class WithIdx(TinyClassifier):
        def training_step(self, batch, batch_idx, optimizer_idx):
            return super().training_step(batch, batch_idx)

    class Two(TinyClassifier):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(RuntimeError, match="Remove the `optimizer_idx` argument from `training_step`"):
        ember.Trainer(max_steps=1, **QUIET).fit(WithIdx(), tiny_loaders()[0])
    with pytest.raises(ember.ConfigurationError, match="multiple optimizers is only supported with manual optim"):
        ember.Trainer(max_steps=1, **QUIET).fit(Two(), tiny_loaders()[0])


# -- the step's arguments ------------------------------------------------------------------------------------------


def test_a_step_taking_args_gets_the_dataloader_index_in_third_place_under_several_loaders():
    seen = []

    class Model(TinyClassifier):
        def validation_step(self, *args):
            seen.append(len(args) if len(args) < 3 else ("idx", args[2]))

    val = tiny_loaders(n=8)[1]
    trainer = ember.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, **QUIET)
    trainer.fit(Model(), tiny_loaders()[0], [val, val])
    assert seen == [("idx", 0), ("idx", 1)]
    seen.clear()
    trainer.validate(Model(), val, verbose=False)  # one loader: (batch, batch_idx), as in Lightning
    assert seen == [2]
