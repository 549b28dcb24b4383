"""LightningModule/LightningDataModule behaviour ported code relies on: save_hyperparameters in its forms, the
hyperparameter entries of checkpoints and load_from_checkpoint, DataModule.from_datasets, the optimizer wrapper."""

from __future__ import annotations

import warnings
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ember.lightning.pytorch as pl
from ember.core.errors import ConfigurationError
from ember.lightning.pytorch.utilities.model_helpers import is_overridden


class Boring(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> Any:
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


class OneDict(Boring):
    def __init__(self, hparams: Any) -> None:
        super().__init__()
        self.save_hyperparameters(hparams)


class DictDataModule(pl.LightningDataModule):
    def __init__(self, hparams: Any) -> None:
        super().__init__()
        self.save_hyperparameters(hparams)

    def train_dataloader(self) -> Any:
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def _fit(tmp_path: Path, model: Any, datamodule: Any = None) -> dict:
    trainer = pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_epochs=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=datamodule)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(str(path))
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("given", [{"test_arg": 14}, Namespace(test_arg=14)])
def test_single_dict_or_namespace_is_saved_and_rebuilt_as_that_argument(tmp_path: Path, given: Any) -> None:
    model = OneDict(given)
    assert type(model.hparams) is pl.utilities.AttributeDict and model.hparams.test_arg == 14
    checkpoint = _fit(tmp_path, model)
    assert checkpoint[OneDict.CHECKPOINT_HYPER_PARAMS_KEY] == {"test_arg": 14}
    assert checkpoint[OneDict.CHECKPOINT_HYPER_PARAMS_NAME] == "hparams"
    loaded = OneDict.load_from_checkpoint(tmp_path / "last.ckpt")
    assert loaded.hparams.test_arg == 14
    assert OneDict.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=None).hparams.test_arg == 14


def test_datamodule_hparams_have_their_own_checkpoint_keys(tmp_path: Path) -> None:
    checkpoint = _fit(tmp_path, Boring(), DictDataModule({"test_arg": 14}))
    assert checkpoint["datamodule_hyper_parameters"] == {"test_arg": 14}
    assert checkpoint["datamodule_hparams_name"] == "hparams"
    assert "hyper_parameters" not in checkpoint  # the module saved none
    assert DictDataModule.load_from_checkpoint(tmp_path / "last.ckpt").hparams.test_arg == 14


def test_load_drops_unknown_keywords_and_keeps_var_keyword_ones(tmp_path: Path) -> None:
    class Named(Boring):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()

    _fit(tmp_path, Named(batch_size=8))
    loaded = Named.load_from_checkpoint(tmp_path / "last.ckpt", unknown=3)
    assert loaded.hparams == {"batch_size": 8}

    class Positional(Boring):
        def __init__(self, hparams: Any) -> None:
            super().__init__()

    class VarArgs(Positional):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)

    # a **kwargs __init__ gets every saved name: here one its base refuses, as a TypeError
    with pytest.raises(TypeError, match=r"__init__\(\) got an unexpected keyword argument 'batch_size'"):
        VarArgs.load_from_checkpoint(tmp_path / "last.ckpt")


def test_past_hparams_key_is_read(tmp_path: Path) -> None:
    class Named(Boring):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()

    checkpoint = _fit(tmp_path, Named())
    checkpoint["module_arguments"] = {"batch_size": -17}
    del checkpoint["hyper_parameters"]
    torch.save(checkpoint, tmp_path / "last.ckpt")
    assert Named.load_from_checkpoint(tmp_path / "last.ckpt").hparams.batch_size == -17


def test_subclass_ignore_drops_what_the_base_kept() -> None:
    class Base(Boring):
        def __init__(self, arg1: int, arg2: int, arg3: int) -> None:
            super().__init__()
            self.save_hyperparameters(ignore="arg1")

    class Sub(Base):
        def __init__(self, arg1: int, arg2: int, arg3: int) -> None:
            super().__init__(arg1=arg1, arg2=arg2, arg3=arg3)
            self.save_hyperparameters(ignore=("arg2",))

    assert Sub(1, 2, 3).hparams == {"arg1": 1, "arg3": 3}


@pytest.mark.parametrize("base", [pl.LightningModule, pl.LightningDataModule])
def test_object_built_in_another_init_sees_its_arguments(base: type) -> None:
    class Child(base):  # type: ignore[valid-type,misc]
        def __init__(self, dropout: float, init_method: str) -> None:
            super().__init__()
            self.save_hyperparameters(ignore=["dropout"])

    class Parent(base):  # type: ignore[valid-type,misc]
        def __init__(self, batch_size: int) -> None:
            super().__init__()
            self.child = Child(dropout=0.1, init_method="xavier")

    class Plain:  # not of the family: the walk ends here
        def __init__(self, seed: int = 1) -> None:
            self.parent = Parent(batch_size=64)

    assert Plain().parent.child.hparams == {"init_method": "xavier", "batch_size": 64}


def test_dataclass_module_saves_its_init_fields() -> None:
    @dataclass
    class DataClassModel(Boring):
        mandatory: int
        optional: str = "optional"
        hidden: int = field(default=9, init=False)

        def __post_init__(self) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert DataClassModel(33, optional="x").hparams == {"mandatory": 33, "optional": "x"}


def test_primitive_alone_is_refused_and_modules_are_kept_with_a_warning() -> None:
    class Primitive(Boring):
        def __init__(self, arg1: int) -> None:
            super().__init__()
            self.save_hyperparameters(arg1)

    with pytest.raises(ValueError, match=r"Primitives \(<class 'bool'>"):
        Primitive(42)

    class WithEncoder(Boring):
        def __init__(self, encoder: torch.nn.Module, other: int = 7) -> None:
            super().__init__()
            self.save_hyperparameters()

    with pytest.warns(UserWarning, match="is an instance of `nn.Module`"):
        model = WithEncoder(torch.nn.Linear(1, 1))
    assert list(model.hparams) == ["encoder", "other"]


def test_loggers_get_the_initial_hparams_and_colliding_ones_fail(tmp_path: Path) -> None:
    logged: list[dict] = []

    class Recorder(pl.loggers.Logger):
        name, version = "rec", 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            logged.append(dict(params))

        def log_metrics(self, metrics: Any, step: Any = None) -> None:
            pass

    class Kw(Boring):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            self.save_hyperparameters()

    model = Kw(running_arg=123)
    model.hparams.running_arg = -1
    trainer = pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_epochs=1, logger=Recorder(),
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(model)
    assert logged and logged[0]["running_arg"] == 123

    trainer = pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_epochs=1, logger=Recorder(),
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    with pytest.raises(RuntimeError, match="Error while merging hparams"):
        trainer.fit(OneDict({"data_dir": "a"}), datamodule=DictDataModule({"data_dir": "b", "test_arg": 1}))


def test_from_datasets_builds_the_dataloaders() -> None:
    train, val = TensorDataset(torch.randn(8, 4)), TensorDataset(torch.randn(6, 4))
    dm = pl.LightningDataModule.from_datasets(train, [val, val], batch_size=2, num_workers=0)
    loader = dm.train_dataloader()
    assert loader.dataset is train and loader.batch_size == 2
    assert [v.dataset for v in dm.val_dataloader()] == [val, val]
    assert hasattr(dm, "test_dataloader") and not is_overridden("test_dataloader", dm)  # as in Lightning
    with pytest.raises(ConfigurationError, match="`test_dataloader` must be implemented"):
        dm.test_dataloader()

    class Takes(pl.LightningDataModule):
        def __init__(self, other: int, batch_size: int = 1) -> None:
            super().__init__()
            self.other, self.batch_size = other, batch_size

    made = Takes.from_datasets(train, batch_size=4, num_workers=2, other=5)
    assert (made.other, made.batch_size) == (5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pl.LightningDataModule.from_datasets(train, batch_size=4, num_workers=0).train_dataloader()


def test_lightning_optimizer_wraps_an_optimizer_as_an_instance_of_its_class() -> None:
    from ember.lightning.pytorch.core.optimizer import LightningOptimizer

    layer = torch.nn.Linear(3, 4)
    adam = torch.optim.Adam(layer.parameters(), lr=0.1)
    wrapped = LightningOptimizer(adam)
    assert isinstance(wrapped, LightningOptimizer) and isinstance(wrapped, torch.optim.Adam)
    assert wrapped.optimizer is adam and repr(wrapped) == "Lightning" + repr(adam)
    assert wrapped.state is adam.state and wrapped.param_groups is adam.param_groups
    assert wrapped.defaults is adam.defaults
    adam.param_groups[0]["lr"] = 1.0
    saved = adam.state_dict()
    other = LightningOptimizer(torch.optim.Adam(layer.parameters(), lr=100))
    other.load_state_dict(saved)
    assert other.param_groups[0]["lr"] == 1.0 and other.optimizer.param_groups[0]["lr"] == 1.0
    layer(torch.randn(2, 3)).sum().backward()
    assert wrapped.step(closure=lambda: torch.tensor(2.0)) == torch.tensor(2.0)  # the optimizer's own step


def test_optimizers_in_a_run_are_lightning_optimizers(tmp_path: Path) -> None:
    from ember.lightning.pytorch.core.optimizer import LightningOptimizer

    seen: list[Any] = []

    class Manual(Boring):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            opt = self.optimizers()
            seen.append(opt)
            opt.zero_grad()
            self.manual_backward(self.layer(batch[0]).sum())
            opt.step()

    model = Manual()
    pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_epochs=1, logger=False,
               enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False).fit(model)
    assert seen and all(isinstance(o, LightningOptimizer) and isinstance(o, torch.optim.SGD) for o in seen)
    assert model.trainer.global_step == 2
    assert str(seen[0]).startswith("LightningSGD (")


@pytest.mark.parametrize(("trainer_args", "clip_args", "message"), [
    ({"gradient_clip_val": 1e-4}, {"gradient_clip_val": 1e-2},
     r"gradient_clip_val=0.0001\)` and have passed `clip_gradients\(gradient_clip_val=0.01"),
    ({"gradient_clip_algorithm": "norm"}, {"gradient_clip_algorithm": "value"},
     r"gradient_clip_algorithm='norm'\)` and have passed `clip_gradients\(gradient_clip_algorithm='value'"),
])
def test_clip_gradients_arguments_that_disagree_with_the_trainer(tmp_path: Path, trainer_args: dict,
                                                                 clip_args: dict, message: str) -> None:
    class Clipping(Boring):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            self.clip_gradients(optimizer, **clip_args)

    trainer = pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_epochs=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         **trainer_args)
    with pytest.raises(ConfigurationError, match=message):
        trainer.fit(Clipping())


def test_unattached_module_says_so() -> None:
    with pytest.raises(RuntimeError, match="is not attached to a `Trainer`"):
        _ = Boring().trainer


def test_hooks_set_on_the_object_as_callable_objects_are_called(tmp_path: Path) -> None:
    """A callback or module whose hooks are replaced, per object, by ``functools.partial`` wrappers (as Lightning's
    hook-recording tests do): accepted by the Trainer, and called with the hook's arguments."""
    import functools

    called: list[tuple[str, int]] = []

    def record(hook: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        called.append((hook, len(args) + len(kwargs)))
        return fn(*args, **kwargs)

    def wrap(obj: Any, names: list[str], prefix: str) -> None:
        for name in names:
            attr = getattr(obj, name)
            wrapper = functools.partial(record, prefix + name, attr)
            functools.update_wrapper(wrapper, attr)
            setattr(obj, name, wrapper)

    callback = pl.Callback()
    wrap(callback, ["on_fit_start", "on_train_batch_end"], "Callback.")
    model = Boring()
    wrap(model, ["on_train_start", "on_train_batch_start", "configure_model"], "")
    pl.Trainer(accelerator="cpu", default_root_dir=str(tmp_path), max_steps=1, logger=False, callbacks=[callback],
               enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False).fit(model)
    assert called == [("configure_model", 0), ("Callback.on_fit_start", 2), ("on_train_start", 0),
                      ("on_train_batch_start", 2), ("Callback.on_train_batch_end", 5)]
