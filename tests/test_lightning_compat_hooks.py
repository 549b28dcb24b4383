"""Which hooks and methods a run calls, with which arguments, as Lightning calls them: the placeholders of
LightningModule/LightningDataModule, the dataloader index of the evaluation batch hooks, the DataModule's
batch-transfer hooks, ``on_validation_model_zero_grad``'s default, ``configure_gradient_clipping``'s keywords,
``prepare_data_per_node``, and ``trainer._data_connector`` with the loop views' ``setup_data`` outside a run."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
import ember.lightning.pytorch as pl
from ember.core.errors import ConfigurationError, StepSignatureError
from ember.core.hooks.positional import defines
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_dataset, tiny_loaders


def _wrap(obj: Any, names: list[str], called: list[tuple]) -> None:
    """Record every call of ``names`` on ``obj``, as Lightning's hook-order tests wrap each method of the base
    class on the instance (``functools.partial`` with ``update_wrapper``)."""
    def call(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        called.append((name, len(args), tuple(sorted(kwargs))))
        return out

    for name in names:
        attr = getattr(obj, name)
        wrapper = functools.partial(call, name, attr)
        functools.update_wrapper(wrapper, attr)
        setattr(obj, name, wrapper)


def test_the_placeholders_of_lightningmodule_count_as_absent() -> None:
    for name in ("training_step", "validation_step", "test_step", "configure_optimizers", "train_dataloader",
                 "val_dataloader", "test_dataloader", "predict_dataloader"):
        assert callable(getattr(ember.Module, name)) and not defines(ember.Module(), name), name
    assert not hasattr(ember.Module, "on_sanity_check_start")  # a callback's hook: LightningModule has none
    with pytest.raises(ConfigurationError, match="`val_dataloader` must be implemented"):
        ember.Module().val_dataloader()

    class NoSteps(ember.Module):
        pass

    with pytest.raises(ConfigurationError, match="no training_step"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(NoSteps(), tiny_loaders()[0])

    class NoValidation(TinyClassifier):
        validation_step = ember.Module.validation_step

    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    with pytest.warns(UserWarning, match="no validation_step"):
        trainer.fit(NoValidation(), *tiny_loaders())
    assert not trainer.enable_validation and trainer.num_val_batches == []


def test_methods_wrapped_on_the_instance_are_called_where_lightning_calls_them() -> None:
    class Model(TinyClassifier):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            return tiny_loaders(16)[0]

        def val_dataloader(self) -> Any:
            return tiny_loaders(16)[1]

    called: list[tuple] = []
    model = Model()
    _wrap(model, ["configure_optimizers", "train_dataloader", "val_dataloader", "training_step",
                  "validation_step"], called)
    ember.Trainer(**{**FAST_TRAINER_ARGS, "num_sanity_val_steps": 1, "limit_train_batches": 1,
                     "limit_val_batches": 1}).fit(model)
    assert [c[0] for c in called] == ["configure_optimizers", "val_dataloader", "validation_step",
                                      "train_dataloader", "training_step", "validation_step"]
    assert ("validation_step", 2, ()) in called  # (batch, batch_idx): one loader, no index


@pytest.mark.parametrize("loaders", [1, 2])
def test_batch_hooks_taking_args_get_the_index_only_with_several_loaders(loaders: int) -> None:
    seen: dict[str, list[tuple]] = {"module": [], "callback": []}

    class Model(TinyClassifier):
        def on_validation_batch_start(self, *args: Any) -> None:
            seen["module"].append(args[1:])

    class Callback(pl.Callback):
        def on_validation_batch_end(self, *args: Any) -> None:
            seen["callback"].append(args[4:])

    val = tiny_loaders(16)[1]
    ember.Trainer(**{**FAST_TRAINER_ARGS, "callbacks": [Callback()]}).validate(Model(), [val] * loaders)
    if loaders == 1:
        assert seen == {"module": [(0,), (1,)], "callback": [(0,), (1,)]}
    else:
        assert seen["module"] == [(0, 0), (1, 0), (0, 1), (1, 1)] == seen["callback"]


def test_batch_hooks_are_checked_for_the_index_like_the_steps() -> None:
    class Requires(TinyClassifier):
        def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
            pass

    val = tiny_loaders(16)[1]
    with pytest.raises(StepSignatureError, match=r"have included `dataloader_idx` in `Requires.on_validation_batch"):
        ember.Trainer(**FAST_TRAINER_ARGS).validate(Requires(), val)

    class Lacks(TinyClassifier):
        def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:
            pass

    with pytest.raises(StepSignatureError, match=r"no `dataloader_idx` argument in `Lacks.on_validation_batch_start"):
        ember.Trainer(**FAST_TRAINER_ARGS).validate(Lacks(), [val, val])

    class OtherName(TinyClassifier):
        def on_validation_batch_start(self, batch: Any, batch_idx: int, dl_idx: int) -> None:
            pass

    with pytest.raises(TypeError, match="missing 1 required positional argument: 'dl_idx'"):
        ember.Trainer(**FAST_TRAINER_ARGS).validate(OtherName(), val)


def test_the_datamodule_answers_a_transfer_hook_only_where_it_defines_it() -> None:
    train, val = tiny_loaders(16)

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> Any:
            return train

    called: list[tuple] = []
    data, model = Data(), TinyClassifier()
    _wrap(data, ["on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"], called)
    ember.Trainer(**FAST_TRAINER_ARGS).fit(model, datamodule=data)
    assert called == []  # its placeholders, wrapped or not: the module's (defaults) move the batches

    seen = []

    class Moves(Data):
        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            seen.append("datamodule")
            return batch

    class Model(TinyClassifier):
        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            seen.append("module")
            return batch

    with pytest.warns(ember.EmberWarning, match="on_before_batch_transfer is defined by both Model and Moves"):
        ember.Trainer(**FAST_TRAINER_ARGS).fit(Model(), datamodule=Moves())
    assert seen == ["datamodule"] * 2


def test_validation_in_a_fit_starts_without_gradients_by_default() -> None:
    grads: dict[str, list[bool]] = {"default": [], "override": []}

    class Default(TinyClassifier):
        def on_validation_start(self) -> None:
            grads["default"].append(any(p.grad is not None for p in self.parameters()))

    class KeepsThem(Default):
        def on_validation_model_zero_grad(self) -> None:  # replaces the default: the gradients stay
            pass

        def on_validation_start(self) -> None:
            grads["override"].append(any(p.grad is not None for p in self.parameters()))

    ember.Trainer(**FAST_TRAINER_ARGS).fit(Default(), *tiny_loaders(16))
    ember.Trainer(**FAST_TRAINER_ARGS).fit(KeepsThem(), *tiny_loaders(16))
    assert grads == {"default": [False], "override": [True]}


def test_configure_gradient_clipping_gets_its_values_by_keyword() -> None:
    seen = []

    class Model(TinyClassifier):
        def configure_gradient_clipping(self, optimizer: Any, **kwargs: Any) -> None:
            seen.append(kwargs)

    ember.Trainer(**{**FAST_TRAINER_ARGS, "limit_train_batches": 1, "gradient_clip_val": 0.5}).fit(
        Model(), tiny_loaders(16)[0])
    assert seen == [{"gradient_clip_val": 0.5, "gradient_clip_algorithm": None}]


class _Data(pl.LightningDataModule):
    def __init__(self, per_node: bool) -> None:
        super().__init__()
        self.prepare_data_per_node = per_node
        self.prepared = 0

    def prepare_data(self) -> None:
        self.prepared += 1

    def train_dataloader(self) -> Any:
        return tiny_loaders(16)[0]


class _SecondNode:
    """Says this process is local rank 0 of the second node."""

    identity = "test.second-node"

    @ember.hookimpl
    def distributed_info(self) -> dict:
        return {"global_rank": 2, "local_rank": 0, "node_rank": 1, "world_size": 1}


@pytest.mark.parametrize("per_node", [True, False])
def test_prepare_data_per_node_false_prepares_on_the_first_node_only(per_node: bool) -> None:
    first, second = _Data(per_node), _Data(per_node)
    ember.Trainer(**FAST_TRAINER_ARGS).fit(TinyClassifier(), datamodule=first)
    ember.Trainer(**{**FAST_TRAINER_ARGS, "plugins": [_SecondNode()]}).fit(TinyClassifier(), datamodule=second)
    assert (first.prepared, second.prepared) == (1, 1 if per_node else 0)


def test_the_data_connector_attaches_data_outside_a_run() -> None:
    train, val = tiny_loaders(64)
    trainer = pl.Trainer(**{**FAST_TRAINER_ARGS, "limit_val_batches": 0.5, "limit_test_batches": 0})
    model = TinyClassifier()
    trainer.strategy.connect(model)
    trainer._data_connector.attach_data(model, train_dataloaders=train, val_dataloaders=val)

    trainer.validate_loop.setup_data()
    assert trainer.num_val_batches == [4] and trainer.val_dataloaders is val
    trainer.fit_loop.setup_data()
    assert trainer.num_training_batches == 8 and trainer.train_dataloader is train
    trainer.test_loop.setup_data()  # a limit of 0: the loaders are not asked for
    assert trainer.test_dataloaders is None
    trainer.limit_test_batches = 2  # settable between runs, as Lightning's attribute
    trainer.test_loop.setup_data()  # the module has no test_dataloader
    assert trainer.test_dataloaders is None and trainer.num_test_batches == []

    data = _Data(per_node=True)
    trainer._data_connector.attach_datamodule(model, datamodule=data)
    trainer._data_connector.prepare_data()
    assert data.prepared == 1 and trainer.datamodule is data and data.trainer is trainer
    trainer.limit_val_batches = 3
    metrics = trainer.validate(model, DataLoader(tiny_dataset(64), batch_size=8))
    assert trainer.num_val_batches == [3] and metrics


def test_a_fit_resumed_between_epochs_zeroes_the_gradients_after_on_fit_start(tmp_path: Any) -> None:
    train = tiny_loaders(16)[0]
    args = {**FAST_TRAINER_ARGS, "enable_checkpointing": True, "default_root_dir": str(tmp_path)}
    first = ember.Trainer(**args)
    first.fit(TinyClassifier(), train)
    called: list[tuple] = []

    class Model(TinyClassifier):
        def on_fit_start(self) -> None:
            called.append(("on_fit_start",))

        def on_train_start(self) -> None:
            called.append(("on_train_start",))

    model = Model()
    _wrap(model, ["zero_grad"], called)
    ember.Trainer(**{**args, "max_epochs": 2}).fit(model, train, ckpt_path=first.checkpoint_callback.best_model_path)
    assert [c[0] for c in called] == ["on_fit_start", "zero_grad", "on_train_start"]  # as in Lightning
