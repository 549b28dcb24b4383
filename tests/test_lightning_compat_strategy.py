"""What ``trainer.strategy`` answers with Lightning's names (``root_device``, ``lightning_module``, ``connect``,
``backward``, ``tensor_init_context``, ...), and the call shapes Lightning's golden hook-order test
(``models/test_hooks.py``) records: ``stage`` by keyword to ``setup``/``teardown``, methods set on a module
instance, the module's gradients zeroed before each stage, a stage turned off by ``limit_<stage>_batches=0``."""

from __future__ import annotations

import functools
from typing import Any
from unittest import mock

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from ember.core.api.role_plugins import trainer_of
from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.strategies.ddp import DDPStrategy
from ember.plugins.strategies.single_device import SingleDeviceStrategy

QUIET = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "enable_checkpointing": False}


def loader(batches: int = 2) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(2 * batches, 4), torch.randn(2 * batches, 1)), batch_size=2)


class Regressor(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# -- trainer.strategy's Lightning attributes ---------------------------------------------------------------
def test_the_strategy_answers_from_the_trainer_that_selected_it() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1)
    strategy = trainer.strategy
    assert trainer_of(strategy) is trainer
    assert strategy.root_device == trainer.root_device == torch.device("cpu")
    assert strategy.lightning_module is None and strategy.model is None and strategy.optimizers == []
    assert strategy.precision_plugin is trainer.precision_plugin and strategy.accelerator is trainer.accelerator
    assert strategy.is_global_zero and (strategy.global_rank, strategy.world_size) == (0, 1)

    model = Regressor()
    strategy.connect(model)  # as Lightning's: the Trainer's module from now on
    assert trainer.lightning_module is model and strategy.lightning_module is model and strategy.model is model
    trainer.fit(model, loader())
    assert strategy.optimizers == trainer.optimizers and len(strategy.optimizers) == 1
    assert strategy.lightning_module_state_dict().keys() == model.state_dict().keys()


def test_a_strategy_no_trainer_selected_answers_as_a_fresh_one() -> None:
    strategy = SingleDeviceStrategy()
    assert trainer_of(strategy) is None
    assert strategy.root_device == torch.device("cpu") and strategy.lightning_module is None
    with pytest.raises(ConfigurationError, match="no Trainer's"):
        strategy.connect(Regressor())
    assert DDPStrategy().model is None  # the DistributedDataParallel wrapper exists only in a run


def test_tensor_init_context_builds_on_the_device_in_the_precisions_dtype() -> None:
    trainer = ember.Trainer(**QUIET, precision="64-true")
    with trainer.strategy.tensor_init_context():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.dtype == torch.float64 and layer.weight.device == trainer.root_device
    assert torch.get_default_dtype() == torch.float32


def test_strategy_backward_runs_the_loops_backward_with_its_events() -> None:
    seen: list[str] = []

    class Manual(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            loss = super().training_step(batch, batch_idx)
            assert self.trainer.strategy.backward(loss, None) is loss
            assert self.layer.weight.grad is not None
            opt.step()

        def on_before_backward(self, loss: torch.Tensor) -> None:
            seen.append("on_before_backward")

        def on_after_backward(self) -> None:
            seen.append("on_after_backward")

    ember.Trainer(**QUIET, max_epochs=1).fit(Manual(), loader(2))
    assert seen == ["on_before_backward", "on_after_backward"] * 2


def test_a_strategy_answers_root_device_under_another_name() -> None:
    """``root_device`` on a strategy object is Lightning's property; a strategy plugin that answers the role hook
    of that name names its method otherwise (``specname``), and the Trainer still finds it before a run."""

    class MetaStrategy(SingleDeviceStrategy):
        identity = "strategy.meta_device"

        @hookimpl(specname="root_device")
        def device_of_this_process(self, trainer: Any) -> torch.device:
            return torch.device("meta")

    trainer = ember.Trainer(**QUIET, strategy=MetaStrategy())
    assert trainer.root_device == torch.device("meta") == trainer.strategy.root_device


# -- the call shapes of Lightning's golden hook-order test ---------------------------------------------------
def test_setup_and_teardown_pass_the_stage_by_keyword_to_a_wrapper_that_takes_it() -> None:
    class Noted(ember.Callback):
        pass

    callback, model = Noted(), Regressor()
    callback.setup = mock.Mock()  # type: ignore[method-assign]
    callback.teardown = mock.Mock()  # type: ignore[method-assign]
    calls: list[tuple[Any, ...]] = []
    model.setup = functools.partial(lambda *a, **k: calls.append(("setup", a, k)))  # type: ignore[method-assign]
    trainer = ember.Trainer(**QUIET, max_epochs=1, callbacks=[callback])
    trainer.fit(model, loader())
    callback.setup.assert_called_once_with(trainer, model, stage="fit")
    callback.teardown.assert_called_once_with(trainer, model, stage="fit")
    assert calls == [("setup", (), {"stage": "fit"})]


def test_a_method_set_on_the_module_instance_is_called_in_the_class_methods_place() -> None:
    model, moved, added = Regressor(), [], ember.Callback()
    original = model.transfer_batch_to_device

    def record(batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        moved.append((device, dataloader_idx))
        return original(batch, device, dataloader_idx)

    model.transfer_batch_to_device = functools.partial(record)  # type: ignore[method-assign]
    model.configure_callbacks = functools.partial(lambda: [added])  # type: ignore[method-assign]
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_val_batches=0)
    trainer.fit(model, loader(2))
    assert moved == [(torch.device("cpu"), 0)] * 2
    assert any(p is added for _, p in trainer.extra_plugins)


def test_each_stage_starts_with_the_modules_gradients_zeroed() -> None:
    model = Regressor()
    model.layer.weight.grad = torch.ones_like(model.layer.weight)
    ember.Trainer(**QUIET).validate(model, loader(1), verbose=False)
    assert model.layer.weight.grad is None


def test_limit_zero_turns_an_evaluation_stage_off() -> None:
    started: list[str] = []

    class Watched(Regressor):
        def val_dataloader(self) -> DataLoader:
            started.append("val_dataloader")
            return loader()

        def on_validation_start(self) -> None:
            started.append("on_validation_start")

        def on_predict_start(self) -> None:
            started.append("on_predict_start")

    trainer = ember.Trainer(**QUIET, limit_val_batches=0, limit_predict_batches=0)
    assert trainer.validate(Watched(), verbose=False) == []
    assert trainer.predict(Watched(), loader(), ckpt_path="current") is None
    assert started == [] and trainer.num_val_batches == [] and trainer.num_predict_batches == []


def test_a_callback_has_lightnings_callback_methods_and_may_still_implement_module_hooks() -> None:
    assert not hasattr(ember.Callback, "on_before_batch_transfer")
    assert not hasattr(ember.Callback, "on_validation_model_eval")
    assert hasattr(ember.Callback, "on_validation_start") and hasattr(ember.Callback, "setup")
    seen: list[str] = []

    class Own(ember.Callback):
        def on_validation_model_eval(self, trainer: Any, pl_module: Any) -> None:
            seen.append("on_validation_model_eval")

    ember.Trainer(**QUIET, callbacks=[Own()]).validate(Regressor(), loader(1), verbose=False)
    assert seen == ["on_validation_model_eval"]


def test_a_lightning_strategy_object_answers_the_same() -> None:
    from ember.lightning.pytorch.strategies import SingleDeviceStrategy as LightningSingle

    connected: list[str] = []

    class Mine(LightningSingle):
        def connect(self, model: Any) -> None:
            connected.append(type(model).__name__)
            super().connect(model)

    trainer = ember.Trainer(**QUIET, max_epochs=1, strategy=Mine())
    model = Regressor()
    trainer.strategy.connect(model)
    assert trainer.lightning_module is model and trainer.strategy.lightning_module is model
    assert trainer.strategy.precision_plugin is trainer.precision_plugin
    assert trainer.strategy.root_device == torch.device("cpu")
    trainer.fit(model, loader())
    assert connected == ["Regressor", "Regressor"] and trainer.strategy.optimizers == trainer.optimizers


# -- collectives with Lightning's arguments ----------------------------------------------------------------
class Collectives(Regressor):
    """Calls trainer.strategy's collectives as Lightning code does, and logs what they answered."""

    def on_train_start(self) -> None:
        strategy, rank = self.trainer.strategy, self.trainer.global_rank
        strategy.barrier()
        strategy.barrier("named")
        self.answers = {
            "summed": strategy.reduce(torch.tensor(float(rank + 1)), reduce_op="sum"),
            "mean": strategy.reduce(torch.tensor(float(rank + 1))),
            "from_last": float(strategy.broadcast(self.trainer.world_size - 1 - rank, src=0)),
            "any_zero": float(strategy.reduce_boolean_decision(rank == 0, all=False)),
            "all_zero": float(strategy.reduce_boolean_decision(rank == 0)),
            "gathered": float(strategy.all_gather(torch.tensor([float(rank)])).sum()),
        }

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log_dict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in self.answers.items()})
        return super().training_step(batch, batch_idx)


def test_collectives_take_lightnings_arguments_in_one_process() -> None:
    trainer = ember.Trainer(**QUIET, max_epochs=1, limit_val_batches=0)
    strategy = trainer.strategy
    assert strategy.reduce(torch.tensor(2.0), reduce_op="sum") == 2.0 and strategy.broadcast("x") == "x"
    assert strategy.reduce_boolean_decision(True) is True and strategy.barrier() is None  # outside a run too
    trainer.fit(Collectives(), loader(1))
    got = {k: v.item() for k, v in trainer.callback_metrics.items()}
    assert got == {"summed": 1.0, "mean": 1.0, "from_last": 0.0, "any_zero": 1.0, "all_zero": 1.0, "gathered": 0.0}
    with pytest.raises(ValueError, match="reduce_op='median'"):
        strategy.reduce(torch.tensor(1.0), reduce_op="median")


@pytest.mark.slow
def test_collectives_take_lightnings_arguments_in_a_group_of_two() -> None:
    trainer = ember.Trainer(**QUIET, strategy="ddp_spawn", devices=2, max_epochs=1, limit_val_batches=0)
    trainer.fit(Collectives(), loader(2))
    got = {k: v.item() for k, v in trainer.callback_metrics.items()}
    assert got == {"summed": 3.0, "mean": 1.5, "from_last": 1.0, "any_zero": 1.0, "all_zero": 0.0, "gathered": 1.0}
