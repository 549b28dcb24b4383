"""Lightning code on ember with only its imports changed: ``ember.lightning``, hooks taken by position, the
module overrides, the LightningModule and LightningDataModule API.

The scenarios in tests/lightning/api_scenarios.py run here on ember and are compared with what Lightning 2.6
did in them (tests/lightning/lightning_api.json, written by tests/lightning/record_lightning_api.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
import ember.lightning as L
from ember.core.hooks.plugin_manager import PluginManager
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_loaders

sys.path.insert(0, str(Path(__file__).parent / "lightning"))
from api_scenarios import SCENARIOS  # noqa: E402

RECORDED = json.loads((Path(__file__).parent / "lightning" / "lightning_api.json").read_text())


# -- the same code on Lightning and on ember -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_lightning(name: str) -> None:
    expected = RECORDED[name]
    got = SCENARIOS[name](L)
    assert set(got) == set(expected)
    for key, value in expected.items():
        if key in ("weights", "predictions"):
            assert got[key] == pytest.approx(value, abs=1e-5), key
        else:
            assert got[key] == value, key


def test_recorded_scenarios_call_every_override() -> None:
    """The fixture itself shows each override being called (so the comparison above covers them)."""
    names = {call[0] for call in RECORDED["overrides"]["calls"]}
    assert {"optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "configure_gradient_clipping", "backward",
            "transfer_batch_to_device", "on_before_batch_transfer", "on_after_batch_transfer", "configure_model",
            "module-cb.setup"} <= names
    assert not any(n.startswith("trainer-cb.") for n in names)  # configure_callbacks replaced it


# -- ember.lightning -------------------------------------------------------------------------------------------
def test_lightning_names_are_embers_objects() -> None:
    import ember.lightning.pytorch as pl
    from ember.lightning.callbacks import EarlyStopping, ModelCheckpoint, StochasticWeightAveraging
    from ember.lightning.loggers import CSVLogger
    from ember.lightning.pytorch.callbacks import LearningRateMonitor
    from ember.plugins.callbacks import EarlyStopping as EmberEarlyStopping
    from ember.plugins.callbacks import LearningRateMonitor as EmberLRMonitor
    from ember.plugins.callbacks import ModelCheckpoint as EmberCheckpoint
    from ember.plugins.callbacks.swa import SWA
    from ember.plugins.loggers.csv_logger import CSVLogger as EmberCSV

    assert (L.Trainer, L.LightningModule, L.LightningDataModule, L.Callback, L.seed_everything) == \
        (ember.Trainer, ember.Module, ember.DataModule, ember.Callback, ember.seed_everything)
    assert (pl.Trainer, pl.LightningModule) == (ember.Trainer, ember.Module)
    assert (EarlyStopping, LearningRateMonitor, StochasticWeightAveraging) == (EmberEarlyStopping, EmberLRMonitor, SWA)
    # CSVLogger is ember's with Lightning's default folder name, and covers every ember one
    assert issubclass(CSVLogger, EmberCSV) and isinstance(EmberCSV(), CSVLogger)
    # ModelCheckpoint is ember's with Lightning's defaults (save_last=None), and covers every ember one
    assert pl.callbacks.ModelCheckpoint is ModelCheckpoint and issubclass(ModelCheckpoint, EmberCheckpoint)
    assert isinstance(EmberCheckpoint(), ModelCheckpoint)


def test_a_lightning_name_ember_lacks_says_the_ember_way() -> None:
    import ember.lightning.callbacks as callbacks
    from ember.lightning._names import UnsupportedError

    with pytest.raises(UnsupportedError, match="ember.plugins.callbacks.ema.EMA"):
        callbacks.WeightAveraging()  # the name imports; using it says what to use
    with pytest.raises(AttributeError, match="NoSuchCallback"):
        callbacks.NoSuchCallback  # noqa: B018


def test_nothing_outside_ember_lightning_imports_it() -> None:
    """``import ember`` stays as fast as it was: only ember.lightning's own modules import ember.lightning."""
    package = Path(ember.__file__).parent
    importers = [str(p.relative_to(package)) for p in package.rglob("*.py")
                 if "lightning" not in p.relative_to(package).parts and "ember.lightning" in p.read_text()]
    assert importers == []


# -- hooks by position -----------------------------------------------------------------------------------------
class _OddNames(L.Callback):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_train_batch_start(self, tr, m, b, i):
        self.seen.append(("start", type(tr).__name__, type(m).__name__, i))

    def on_train_batch_end(self, _, __, out, ___, idx):
        self.seen.append(("end", sorted(out), idx))

    def on_fit_end(self, *args):
        self.seen.append(("fit_end", len(args)))


def test_callback_methods_take_arguments_by_position_with_any_names() -> None:
    cb = _OddNames()
    train, _ = tiny_loaders(n=16, batch_size=8)
    ember.Trainer(callbacks=[cb], **FAST_TRAINER_ARGS).fit(TinyClassifier(), train)
    assert cb.seen == [("start", "Trainer", "TinyClassifier", 0), ("end", ["loss"], 0),
                       ("start", "Trainer", "TinyClassifier", 1), ("end", ["loss"], 1), ("fit_end", 2)]


def test_plain_hookimpl_plugins_still_match_by_name() -> None:
    seen = []

    class ByName:
        @ember.hookimpl
        def on_train_batch_end(self, batch_idx, trainer):  # out of the spec's order: matched by name
            seen.append((batch_idx, type(trainer).__name__))

    train, _ = tiny_loaders(n=16, batch_size=8)
    ember.Trainer(callbacks=[ByName()], **FAST_TRAINER_ARGS).fit(TinyClassifier(), train)
    assert seen == [(0, "Trainer"), (1, "Trainer")]


def test_module_hooks_with_other_argument_names() -> None:
    seen = []

    class Model(TinyClassifier):
        def on_train_batch_end(self, out, b, i):
            seen.append((sorted(out), i))

        def on_before_optimizer_step(self, opt):
            seen.append(type(opt).__name__)

    train, _ = tiny_loaders(n=16, batch_size=8)
    ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), train)
    assert seen == ["SGD", (["loss"], 0), "SGD", (["loss"], 1)]


def test_a_hook_needing_more_positions_than_passed_is_a_clear_error() -> None:
    class TooMany(L.Callback):
        def on_fit_start(self, trainer, pl_module, extra):
            pass

    train, _ = tiny_loaders(n=16, batch_size=8)
    with pytest.raises(ember.PluginError, match=r"TooMany.on_fit_start.*takes 3 positional.*\(trainer, pl_module\)"):
        ember.Trainer(callbacks=[TooMany()], **FAST_TRAINER_ARGS).fit(TinyClassifier(), train)


def test_base_no_op_hooks_are_never_registered() -> None:
    """A hook nobody overrides costs nothing: the bases' no-ops are not implementations."""
    pm = PluginManager()
    pm.register(TinyClassifier(), name="module")
    pm.register(L.Callback(), name="callback")
    pm.register(L.LightningDataModule(), name="datamodule", datamodule=True)
    implemented = {name for name, caller in vars(pm.hook).items()
                   if isinstance(caller, type(pm.hook.setup)) and caller.get_hookimpls()}
    assert implemented == set()


def test_super_calls_reach_the_base_no_ops() -> None:
    calls = []

    class Model(TinyClassifier):
        def on_train_epoch_end(self):
            super().on_train_epoch_end()
            calls.append("module")

    class CB(L.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            super().on_train_epoch_end(trainer, pl_module)
            calls.append("callback")

    train, _ = tiny_loaders(n=16, batch_size=8)
    ember.Trainer(callbacks=[CB()], **FAST_TRAINER_ARGS).fit(Model(), train)
    assert calls == ["callback", "module"]


# -- overrides: never ignored in silence -------------------------------------------------------------------
def test_an_override_ember_never_calls_is_named() -> None:
    class Model(TinyClassifier):
        def on_predict_model_train(self):
            pass

    train, _ = tiny_loaders(n=16, batch_size=8)
    with pytest.warns(ember.EmberWarning, match="on_predict_model_train"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), train)


def test_optimization_overrides_under_manual_optimization_are_named() -> None:
    class Model(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(super().training_step(batch, batch_idx))
            opt.step()

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            raise AssertionError("not called under manual optimization")

    train, _ = tiny_loaders(n=16, batch_size=8)
    with pytest.warns(ember.EmberWarning, match=r"optimizer_step\(\) is not called under manual optimization"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), train)


def test_optimizer_step_that_skips_the_closure_is_an_error() -> None:
    class Model(TinyClassifier):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            optimizer.step()

    train, _ = tiny_loaders(n=16, batch_size=8)
    with pytest.raises(ember.ConfigurationError, match="did not run optimizer_closure"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), train)


def test_optimizer_step_override_counts_steps_and_may_skip_stepping() -> None:
    """As in Lightning, global_step counts optimizer_step calls; an override may run the closure and not step."""
    class Model(TinyClassifier):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            if batch_idx % 2:
                optimizer_closure()
            else:
                optimizer.step(closure=optimizer_closure)

    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    train, _ = tiny_loaders(n=16, batch_size=8)
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    trainer.fit(model, train)
    assert trainer.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_lr_scheduler_step_gets_the_monitored_metric() -> None:
    seen = []

    class Model(TinyClassifier):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {
                "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "monitor": "train_loss"}}

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("train_loss", loss, on_epoch=True, on_step=False)
            return loss

        def lr_scheduler_step(self, scheduler, metric):
            seen.append((type(scheduler).__name__, float(metric)))

    train, _ = tiny_loaders(n=16, batch_size=8)
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 2})
    trainer.fit(Model(), train)
    assert [name for name, _ in seen] == ["ReduceLROnPlateau"] * 2
    assert seen[-1][1] == pytest.approx(float(trainer.callback_metrics["train_loss"]))


def test_manual_backward_forwards_its_arguments() -> None:
    seen = []

    class Model(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss, retain_graph=True)
            self.manual_backward(loss, inputs=[self.net[0].weight])  # only reaches Tensor.backward
            seen.append(self.net[2].weight.grad is not None)

        def backward(self, loss, *args, **kwargs):
            seen.append(sorted(kwargs))
            super().backward(loss, *args, **kwargs)

    train, _ = tiny_loaders(n=8, batch_size=8)
    ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), train)
    assert seen == [["retain_graph"], ["inputs"], True]


def test_backward_override_under_a_scaling_precision_is_named() -> None:
    class Model(TinyClassifier):
        def backward(self, loss, *args, **kwargs):
            loss.backward()

    train, _ = tiny_loaders(n=8, batch_size=8)
    with pytest.warns(ember.EmberWarning, match=r"backward\(\) is not called: the precision.16-mixed"):
        ember.Trainer(**{**FAST_TRAINER_ARGS, "precision": "16-mixed"}).fit(Model(), train)


# -- LightningModule API -----------------------------------------------------------------------------------
class HparamsLogger:
    """A logger that records the hyperparameters it is given into ``logged``."""

    role = "logger"

    def __init__(self, logged: list[dict]) -> None:
        self.logged = logged

    @ember.hookimpl
    def log_hyperparams(self, params):
        self.logged.append(dict(params))

    @ember.hookimpl
    def log_metrics(self, metrics, step):
        pass


def test_logger_loggers_and_hyperparameters_kept_from_loggers() -> None:
    logged: list[dict] = []

    class Model(TinyClassifier):
        def __init__(self, lr: float = 0.1, secret: str = "s", hidden: int = 16) -> None:
            super().__init__(lr=lr, hidden=hidden)
            self.save_hyperparameters(ignore=["secret"], logger=False)

        def on_fit_start(self):
            logged.append({"logger": self.logger, "loggers": self.loggers})

    logger = HparamsLogger(logged)
    model = Model()
    assert dict(model.hparams) == {"lr": 0.1, "hidden": 16}
    train, _ = tiny_loaders(n=8, batch_size=8)
    ember.Trainer(**{**FAST_TRAINER_ARGS, "logger": logger}).fit(model, train)
    assert logged == [{}, {"logger": logger, "loggers": [logger]}]


def test_predict_step_defaults_to_forward() -> None:
    class Model(ember.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.net(x) * 2

    model = Model()
    x = torch.randn(4, 3)
    out = ember.Trainer(**FAST_TRAINER_ARGS).predict(model, DataLoader(x, batch_size=2))
    assert torch.allclose(torch.cat(out), model(x))


# -- LightningDataModule -------------------------------------------------------------------------------------
class _CountingData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batches_served = 0
        self.loaded: Any = None

    def train_dataloader(self):
        self.batches_served += 1
        return tiny_loaders(n=16, batch_size=self.hparams.batch_size)[0]

    def state_dict(self):
        return {"served": self.batches_served}

    def load_state_dict(self, state_dict):
        self.loaded = state_dict
        self.batches_served = state_dict["served"]


def test_datamodule_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    data = _CountingData()
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "default_root_dir": str(tmp_path)})
    trainer.fit(TinyClassifier(), datamodule=data)
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    assert data.batches_served == 1

    restored = _CountingData()
    resumed = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 2, "default_root_dir": str(tmp_path)})
    resumed.fit(TinyClassifier(), datamodule=restored, ckpt_path=str(path))
    assert restored.loaded == {"served": 1}
    assert resumed.current_epoch == 2


def test_datamodule_hparams_reach_the_loggers() -> None:
    logged: list[dict] = []

    ember.Trainer(**{**FAST_TRAINER_ARGS, "logger": HparamsLogger(logged)}).fit(TinyClassifier(),
                                                                               datamodule=_CountingData(4))
    assert logged == [{"batch_size": 4}]


def test_a_datamodules_transfer_batch_to_device_wins() -> None:
    seen = []

    class Data(_CountingData):
        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            seen.append(("datamodule", device.type, dataloader_idx))
            return batch

    class Model(TinyClassifier):
        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            raise AssertionError("the DataModule's is used, as in Lightning")

    with pytest.warns(ember.EmberWarning, match="defined by both Model and Data"):  # as Lightning warns
        ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), datamodule=Data())
    assert seen == [("datamodule", "cpu", 0)] * 2


def test_freeze_and_unfreeze() -> None:
    model = TinyClassifier()
    assert model.freeze() is model and not model.training
    assert not any(p.requires_grad for p in model.parameters())
    model.unfreeze()
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_positional_hooks_under_tracing_and_on_exception(tmp_path: Path) -> None:
    """Tracing times copies of the implementations and on_exception guards them: both keep the positions."""
    seen = []

    class CB(L.Callback):
        def on_train_batch_end(self, tr, m, out, b, idx):
            seen.append(idx)
            raise ValueError("boom")

        def on_exception(self, tr, m, err):
            seen.append(type(err).__name__)

    trace = tmp_path / "trace.jsonl"
    train, _ = tiny_loaders(n=16, batch_size=8)
    with pytest.raises(ValueError, match="boom"):
        ember.Trainer(callbacks=[CB()], trace=str(trace), **FAST_TRAINER_ARGS).fit(TinyClassifier(), train)
    assert seen == [0, "ValueError"]
    assert "on_train_batch_end" in trace.read_text()
