"""Every argument and public attribute of Lightning 2.6's Trainer (recorded from the installed Lightning by
tests/lightning/record_loop.py into tests/lightning/surface.json) works on ember or is refused with the ember way,
and the cheap ones work for real."""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
from ember.core.hooks.config import LIGHTNING_ELSEWHERE
from ember.testing import FAST_TRAINER_ARGS, TinyClassifier, tiny_dataset

SURFACE = json.loads((Path(__file__).parent / "lightning" / "surface.json").read_text())
ARGUMENTS: dict[str, str | None] = SURFACE["trainer_arguments"]
QUIET = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
         "enable_checkpointing": False}


def test_the_recorded_surface_is_lightning_2_6() -> None:
    assert SURFACE["lightning"].startswith("2.6.")
    assert {"overfit_batches", "barebones", "detect_anomaly", "max_steps"} <= set(ARGUMENTS)


@pytest.mark.parametrize("name", list(ARGUMENTS))
def test_every_lightning_argument_takes_its_lightning_default_or_names_the_ember_way(name: str) -> None:
    default = ARGUMENTS[name]
    value = ast.literal_eval(default) if default is not None else None
    kwargs = {k: v for k, v in QUIET.items() if k != name}
    trainer = ember.Trainer(**kwargs, **{name: value})  # Lightning's own default is accepted everywhere
    assert trainer is not None
    if name in LIGHTNING_ELSEWHERE:  # any other value is refused, naming what to do instead
        with pytest.raises(ember.ConfigurationError, match=f"Trainer\\({name}=.*ember does not take"):
            ember.Trainer(**kwargs, **{name: "something"})


def test_every_lightning_argument_is_accepted_or_explained() -> None:
    from ember.core.hooks.config import FIELDS
    from ember.core.hooks.options import declarations

    ours = set(FIELDS) | {o.name for o in declarations().of_plugins()}
    unexplained = [n for n in ARGUMENTS if n not in ours and n not in LIGHTNING_ELSEWHERE]
    assert unexplained == []
    for name in LIGHTNING_ELSEWHERE:  # an explanation for a name Lightning does not have would be stale
        assert name in ARGUMENTS


@pytest.mark.parametrize("name", SURFACE["trainer_attributes"])
def test_every_public_trainer_attribute_of_lightning_exists(name: str) -> None:
    trainer = ember.Trainer(**QUIET)
    assert hasattr(type(trainer), name) or name in vars(trainer)


def test_device_attributes() -> None:
    trainer = ember.Trainer(**QUIET, devices=1)
    assert (trainer.num_devices, trainer.device_ids, trainer.num_nodes, trainer.world_size) == (1, [0], 1, 1)
    assert ember.Trainer(**QUIET, devices=[0, 2]).device_ids == [0, 2]
    assert ember.Trainer(**QUIET, devices="0,1").num_devices == 2
    assert trainer.strategy is trainer.role_plugins["strategy"]
    assert trainer.accelerator is trainer.role_plugins["accelerator"]
    assert trainer.distributed_sampler_kwargs is None and trainer.scaler is None


def loader(batches: int, shuffle: bool = False) -> DataLoader:
    return DataLoader(tiny_dataset(n=batches * 4), batch_size=4, shuffle=shuffle)


class SeenBatches(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.train_seen: list[torch.Tensor] = []
        self.val_batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_seen.append(batch[0].clone())
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_batches += 1


def test_overfit_batches_repeats_the_same_unshuffled_batches() -> None:
    model = SeenBatches()
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 3}, overfit_batches=2)
    with pytest.warns(UserWarning, match="overfit_batches.*shuffling"):
        trainer.fit(model, loader(8, shuffle=True), loader(5))
    assert trainer.global_step == 6 and model.val_batches == 6  # 2 train and 2 val batches per epoch
    first = model.train_seen[:2]
    assert all(torch.equal(a, b) for a, b in zip(first * 3, model.train_seen, strict=True))
    assert torch.equal(first[0], tiny_dataset(n=32)[0:4][0])  # in dataset order


def test_overfit_batches_wins_over_limit_train_batches() -> None:
    # as in Lightning, overfit_batches sets both limits; the one passed with it is ignored, with a warning
    with pytest.warns(UserWarning, match="overfit_batches.*limit_train_batches=3 is ignored"):
        trainer = ember.Trainer(**QUIET, overfit_batches=2, limit_train_batches=3)
    assert trainer.limit_train_batches == 2 and trainer.limit_val_batches == 2


class CountsLoaders(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        self.made = {"train": 0, "val": 0}

    def train_dataloader(self) -> DataLoader:
        self.made["train"] += 1
        return loader(2)

    def val_dataloader(self) -> DataLoader:
        self.made["val"] += 1
        return loader(1)


@pytest.mark.parametrize(("every", "made"), [(0, 1), (1, 4), (2, 2)])
def test_reload_dataloaders_every_n_epochs(every: int, made: int) -> None:
    model = CountsLoaders()
    trainer = ember.Trainer(**{**FAST_TRAINER_ARGS, "max_epochs": 4}, reload_dataloaders_every_n_epochs=every)
    trainer.fit(model)
    assert model.made == {"train": made, "val": made}
    assert trainer.global_step == 8


def test_detect_anomaly_names_the_backward_that_made_a_nan() -> None:
    class MakesNaN(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return torch.sqrt(loss - loss - 1.0)  # NaN, and its backward is NaN too

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that anomaly detection is slow
        ember.Trainer(**FAST_TRAINER_ARGS).fit(MakesNaN(), loader(1))  # off: no error
        with pytest.raises(RuntimeError, match="SqrtBackward"):
            ember.Trainer(**FAST_TRAINER_ARGS, detect_anomaly=True).fit(MakesNaN(), loader(1))
    assert not torch.is_anomaly_enabled()


def test_sync_batchnorm_is_a_no_op_in_one_process() -> None:
    class WithBN(TinyClassifier):
        def __init__(self) -> None:
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(self.bn(x))

    model = WithBN()
    ember.Trainer(**FAST_TRAINER_ARGS, sync_batchnorm=True).fit(model, loader(1))
    assert type(model.bn) is torch.nn.BatchNorm1d  # SyncBatchNorm only where there are processes to sync


def test_use_distributed_sampler_false_leaves_the_loader_to_each_process() -> None:
    from ember.plugins.strategies.ddp import DDPStrategy

    class Fake:
        world_size, global_rank = 2, 0

        def __init__(self, use: bool) -> None:
            self.config = ember.Trainer(**QUIET, use_distributed_sampler=use).config

    dl = loader(4)
    strategy = DDPStrategy()
    assert strategy.process_dataloader(Fake(False), dl, "train") is None
    assert strategy.process_dataloader(Fake(True), dl, "train") is not dl


def test_barebones_turns_off_what_costs_time_and_refuses_to_turn_it_on() -> None:
    trainer = ember.Trainer(accelerator="cpu", barebones=True)
    assert trainer.config.num_sanity_val_steps == 0 and trainer.config.logger is False
    assert trainer.config.enable_checkpointing is False and trainer.config.enable_progress_bar is False
    assert trainer.loggers == [] and trainer.checkpoint_callbacks == [] and trainer.progress_bar_callback is None
    for name, value in [("logger", True), ("enable_checkpointing", True), ("num_sanity_val_steps", 2),
                        ("detect_anomaly", True), ("fast_dev_run", True)]:
        with pytest.raises(ember.ConfigurationError, match=f"barebones=True.*{name}"):
            ember.Trainer(accelerator="cpu", barebones=True, **{name: value})


def test_barebones_drops_self_log_with_a_warning() -> None:
    class Logs(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("loss", loss)
            return loss

    trainer = ember.Trainer(accelerator="cpu", barebones=True, max_epochs=1)
    with pytest.warns(UserWarning, match="barebones=True"):
        trainer.fit(Logs(), loader(1))
    assert trainer.callback_metrics == {}


def test_inference_mode_false_evaluates_under_no_grad() -> None:
    modes = []

    class Sees(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))

    for flag in (True, False):
        ember.Trainer(**FAST_TRAINER_ARGS, inference_mode=flag).validate(Sees(), loader(1), verbose=False)
    assert modes == [(True, False), (False, False)]


def test_enable_autolog_hparams_false_hands_no_hparams_to_the_loggers() -> None:
    class Logger:
        identity = "logger.recorder"

        def __init__(self) -> None:
            self.params: list[dict] = []

        def log_metrics(self, metrics: dict, step: int) -> None:
            pass

        @ember.hookimpl
        def log_hyperparams(self, params: dict) -> None:
            self.params.append(params)

    class WithHparams(TinyClassifier):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__(lr=lr)
            self.save_hyperparameters()

    for flag, expected in ((True, 1), (False, 0)):
        logger = Logger()
        args = {**FAST_TRAINER_ARGS, "logger": logger}
        ember.Trainer(**args, enable_autolog_hparams=flag).fit(WithHparams(), loader(1))
        assert len(logger.params) == expected


def test_trainer_state_after_each_entry_point() -> None:
    trainer = ember.Trainer(**FAST_TRAINER_ARGS)
    assert trainer.state.status == "initializing" and not trainer.state.finished
    trainer.fit(TinyClassifier(), loader(1))
    assert (trainer.state.fn, trainer.state.stage, trainer.state.status, trainer.state.finished) == \
        ("fit", None, "finished", True)
    trainer.test(TinyClassifier(), loader(1), verbose=False)
    assert (trainer.state.fn, trainer.state.finished) == ("test", True)


@pytest.mark.parametrize("kind", ["trainer_arguments", "trainer_attributes", "module_names", "datamodule_names",
                                  "callback_hooks"])
def test_docs_lightning_md_gives_every_lightning_name_a_status(kind: str) -> None:
    page = (Path(__file__).parents[1] / "docs" / "lightning.md").read_text()
    missing = [name for name in SURFACE[kind] if f"`{name}`" not in page]
    assert missing == [], f"docs/lightning.md does not mention these Lightning {kind}: {missing}"
