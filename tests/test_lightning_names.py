"""Lightning's public names under the same module paths in ``ember.lightning.pytorch``, each used on ember's
Trainer.

The names are recorded from Lightning 2.6 by tests/lightning/record_names.py (tests/lightning/names.json);
docs/lightning.md holds the table of what is provided, checked here against that record.
"""

from __future__ import annotations

import importlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import ember
import ember.lightning.pytorch as pl
from ember.lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, RandomDataset

ROOT = Path(__file__).resolve().parent.parent
RECORDED = json.loads((ROOT / "tests" / "lightning" / "names.json").read_text())
MODULES = {k: v for k, v in RECORDED.items() if k.startswith("lightning.pytorch")}
#: Modules another piece of work provides (the seed classes and the CLI); their names are counted, not required.
ELSEWHERE = ("lightning.pytorch.strategies", "lightning.pytorch.accelerators", "lightning.pytorch.plugins",
             "lightning.pytorch.cli")
QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False)


def twin(module: str) -> str:
    return "ember.lightning." + module[len("lightning."):]


def provided(module: str) -> tuple[list[str], list[str]]:
    """(names the ember twin has, names it lacks)."""
    try:
        mod = importlib.import_module(twin(module))
    except ImportError:
        return [], list(MODULES[module])
    have = [n for n in MODULES[module] if hasattr(mod, n)]
    return have, [n for n in MODULES[module] if n not in have]


# -- the names ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(ELSEWHERE)))
def test_every_recorded_name_is_provided(module: str) -> None:
    _, missing = provided(module)
    assert not missing, f"{twin(module)} lacks {missing}"


def test_docs_table_matches_the_record() -> None:
    """docs/lightning.md's table of provided names gives, per module, what the ember twin provides now."""
    text = (ROOT / "docs" / "lightning.md").read_text()
    rows = dict(re.findall(r"^\| `(lightning\.pytorch[\w.]*)` \| (\d+/\d+) \|", text, re.MULTILINE))
    assert set(rows) == set(MODULES)
    for module in MODULES:
        have, _ = provided(module)
        assert rows[module] == f"{len(have)}/{len(MODULES[module])}", module
    total = sum(len(v) for v in MODULES.values())
    got = sum(len(provided(m)[0]) for m in MODULES)
    assert f"{got} of the {total} names" in text


def test_names_ember_cannot_support_import_and_say_what_to_use() -> None:
    from ember.lightning._names import UnsupportedError
    from ember.lightning.pytorch.callbacks import EMAWeightAveraging
    from ember.lightning.pytorch.loggers import CometLogger
    from ember.lightning.pytorch.profilers import XLAProfiler
    from ember.lightning.pytorch.utilities.model_summary import DeepSpeedSummary

    for cls, hint in ((EMAWeightAveraging, "EMA"), (CometLogger, "Logger"), (XLAProfiler, "PyTorchProfiler")):
        with pytest.raises(UnsupportedError, match=hint):
            cls()
    with pytest.raises(NotImplementedError, match="ModelSummary"):
        DeepSpeedSummary(BoringModel())


# -- the deeper module paths ------------------------------------------------------------------------------------
SUBMODULES: dict[str, list[str]] = RECORDED["submodules"]
#: Names of a recorded module path that ember does not provide (docs/lightning.md lists them): Lightning's internals
#: behind a class ember provides, or helpers of its own ``save_hyperparameters``.
NOT_PROVIDED = {
    "lightning.pytorch.callbacks.progress.rich_progress": ["RichProgressBarTheme"],
    "lightning.pytorch.loggers.logger": ["merge_dicts"],
    "lightning.pytorch.profilers.pytorch": ["RegisterRecordFunction", "ScheduleWrapper"],
    "lightning.pytorch.strategies.deepspeed": ["remove_module_hooks"],
    "lightning.pytorch.accelerators.cuda": ["get_nvidia_gpu_stats"],
    "lightning.pytorch.accelerators.mps": ["get_device_stats"],
    "lightning.pytorch.utilities.parsing": ["clean_namespace", "collect_init_args", "get_init_args",
                                            "parse_class_init_keys", "save_hyperparameters"],
}


@pytest.mark.parametrize("module", sorted(SUBMODULES))
def test_module_paths_give_the_recorded_names(module: str) -> None:
    """``from lightning.pytorch.callbacks.early_stopping import EarlyStopping`` has its twin, and the object is the
    one the package gives (``callbacks.early_stopping.EarlyStopping is callbacks.EarlyStopping``)."""
    mod = importlib.import_module(twin(module))
    missing = [n for n in SUBMODULES[module] if not hasattr(mod, n)]
    assert missing == NOT_PROVIDED.get(module, []), f"{twin(module)} lacks {missing}"
    parent = module
    while parent not in MODULES:
        parent = parent.rpartition(".")[0]
    package = importlib.import_module(twin(parent))
    for name in SUBMODULES[module]:
        if name in MODULES[parent] and hasattr(mod, name):
            assert getattr(mod, name) is getattr(package, name), f"{twin(module)}.{name}"


def test_module_paths_port_by_their_import_lines() -> None:
    """The documented port (``lightning`` -> ``ember.lightning``, ``pytorch_lightning`` ->
    ``ember.lightning.pytorch``, import lines only) reaches every recorded module path."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "lightning"))
    try:
        import project_runner
    finally:
        sys.path.remove(str(ROOT / "tests" / "lightning"))
    lines = []
    for module, names in sorted(SUBMODULES.items()):
        names = [n for n in names if n not in NOT_PROVIDED.get(module, [])]
        lines.append(f"from {module} import {', '.join(names)}")
        lines.append(f"from {module.replace('lightning.pytorch', 'pytorch_lightning', 1)} import {', '.join(names)}")
    ported = project_runner.to_ember("\n".join(lines))
    assert "from lightning" not in ported and "pytorch_lightning" not in ported
    exec(compile(ported, "<ported imports>", "exec"), {})


def test_submodule_helpers(tmp_path: Path) -> None:
    from ember.lightning.pytorch.callbacks.progress.progress_bar import get_standard_metrics
    from ember.lightning.pytorch.callbacks.progress.tqdm_progress import convert_inf
    from ember.lightning.pytorch.callbacks.timer import Interval, Timer
    from ember.lightning.pytorch.loggers.csv_logs import CSVLogger
    from ember.lightning.pytorch.utilities.parsing import lightning_getattr, lightning_hasattr, lightning_setattr

    assert convert_inf(float("inf")) is None and convert_inf(3) == 3
    assert Timer(duration="00:00:00:01", interval=Interval.epoch) is not None
    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, accelerator="cpu", enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         logger=CSVLogger(tmp_path, version="run_1234"))
    assert get_standard_metrics(trainer) == {"v_num": "1234"}

    class Model(BoringModel):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

    model = Model()
    assert lightning_hasattr(model, "lr") and not lightning_hasattr(model, "batch_size")
    lightning_setattr(model, "lr", 0.5)
    assert lightning_getattr(model, "lr") == 0.5 and model.hparams.lr == 0.5


# -- the Trainer's attributes, as Lightning shows them ----------------------------------------------------------
@pytest.mark.parametrize("scenario", sorted(RECORDED["trainer_attributes"]))
def test_trainer_attributes_match_lightning(scenario: str) -> None:
    sys_path = str(ROOT / "tests" / "lightning")
    import sys

    sys.path.insert(0, sys_path)
    try:
        from record_names import TRAINER_SCENARIOS, trainer_attributes
    finally:
        sys.path.remove(sys_path)
    assert trainer_attributes(pl.Trainer)[scenario] == RECORDED["trainer_attributes"][scenario]
    assert set(TRAINER_SCENARIOS) == set(RECORDED["trainer_attributes"])


def test_module_attributes() -> None:
    class Model(BoringModel):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.example_input_array = torch.zeros(2, 32)

    model = Model()
    model.hparams.lr = 0.5
    assert model.hparams_initial == {"lr": 0.1} and model.strict_loading is True
    assert model.to_torchscript(method="trace") is not None  # uses example_input_array


def test_strict_loading_false_resumes_into_a_changed_module(tmp_path: Path) -> None:
    trainer = pl.Trainer(max_steps=2, default_root_dir=tmp_path, **QUIET)
    trainer.fit(BoringModel())
    trainer.save_checkpoint(tmp_path / "a.ckpt")

    class Wider(BoringModel):
        strict_loading = False

        def __init__(self) -> None:
            super().__init__()
            self.extra = torch.nn.Linear(2, 2)

    loaded = Wider.load_from_checkpoint(tmp_path / "a.ckpt")
    assert torch.equal(loaded.layer.weight, trainer.lightning_module.layer.weight)


def test_callback_state_key_and_generate_state_key() -> None:
    class Counter(pl.Callback):
        def __init__(self, what: str) -> None:
            self.what = what

        @property
        def state_key(self) -> str:
            return self._generate_state_key(what=self.what)

    assert Counter("a").state_key == Counter.__qualname__ + "{'what': 'a'}"  # the qualified name, as Lightning
    assert pl.Callback().state_key == "Callback"


# -- utilities ------------------------------------------------------------------------------------------------
def test_misconfiguration_exception_catches_embers_configuration_errors() -> None:
    from ember.lightning.pytorch.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException):
        pl.Trainer(accelerator="cpu", gradient_clip_algorithm="sideways")


def test_rank_zero_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
    from ember.lightning.pytorch.utilities.rank_zero import rank_prefixed_message

    calls = []

    @rank_zero_only
    def note(x: int) -> int:
        calls.append(x)
        return x

    assert note(1) == 1 and rank_zero_only.rank == 0
    monkeypatch.setenv("RANK", "3")
    assert rank_zero_only.rank == 3 and note(2) is None and calls == [1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("hidden")
    assert not caught
    rank_zero_only.rank = 0  # set explicitly, as the Trainer of Lightning does
    try:
        with pytest.warns(UserWarning, match="shown"):
            rank_zero_warn("shown")
        rank_zero_info("info")
    finally:
        rank_zero_only.rank = None  # type: ignore[assignment]
    assert rank_prefixed_message("m", 2) == "[rank: 2] m"


def test_grad_norm_in_on_before_optimizer_step() -> None:
    from ember.lightning.pytorch.utilities import grad_norm

    class Model(BoringModel):
        def on_before_optimizer_step(self, optimizer: Any) -> None:
            norms = grad_norm(self.layer, norm_type=2)
            self.seen = sorted(norms)
            self.log_dict(norms)

    model = Model()
    trainer = pl.Trainer(max_steps=2, limit_val_batches=0, **QUIET)
    trainer.fit(model)
    assert model.seen == ["grad_2.0_norm/bias", "grad_2.0_norm/weight", "grad_2.0_norm_total"]
    assert "grad_2.0_norm_total" in trainer.callback_metrics


def test_attribute_dict_move_data_and_helpers() -> None:
    from ember.lightning.pytorch.utilities import (
        AttributeDict,
        find_shared_parameters,
        is_picklable,
        move_data_to_device,
        set_shared_parameters,
    )

    assert AttributeDict(a=1).a == 1 and type(BoringModel().hparams) is AttributeDict
    batch = {"x": [torch.ones(1)], "y": (torch.zeros(1), 3)}
    moved = move_data_to_device(batch, "cpu")
    assert moved["y"][1] == 3 and torch.equal(moved["x"][0], torch.ones(1))
    assert is_picklable(1) and not is_picklable(lambda: 0)
    tied = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    groups = find_shared_parameters(tied)
    assert groups == [["0.weight", "1.weight"]]
    tied[1].weight = torch.nn.Parameter(torch.zeros(2, 2))
    assert set_shared_parameters(tied, groups)[1].weight is tied[0].weight


def test_types_annotate_a_module() -> None:
    from ember.lightning.pytorch.utilities.types import STEP_OUTPUT, LRSchedulerConfig, OptimizerLRScheduler

    class Model(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> STEP_OUTPUT:
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> OptimizerLRScheduler:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}

    trainer = pl.Trainer(max_steps=2, limit_val_batches=0, **QUIET)
    trainer.fit(Model())
    assert isinstance(trainer.lr_scheduler_configs[0], LRSchedulerConfig)


def test_combined_loader_modes_and_fit() -> None:
    from ember.lightning.pytorch.utilities import CombinedLoader

    a, b = range(4), range(10, 16)
    assert [x for x, _, _ in CombinedLoader({"a": a, "b": b}, "min_size")] == [{"a": i, "b": 10 + i} for i in range(4)]
    cycled = [x for x, _, _ in CombinedLoader([a, b], "max_size_cycle")]
    assert len(cycled) == 6 and cycled[4] == [0, 14]
    assert [x for x, _, _ in CombinedLoader([a, b], "max_size")][-1] == [None, 15]
    assert [(x, i, d) for x, i, d in CombinedLoader([a, b], "sequential")][4] == (10, 0, 1)

    class Model(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return {"loss": self.step(batch["a"]) + self.step(batch["b"])}

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("v", self.step(batch))

    loaders = {"a": DataLoader(RandomDataset(32, 8), batch_size=2), "b": DataLoader(RandomDataset(32, 4), batch_size=2)}
    trainer = pl.Trainer(max_epochs=1, num_sanity_val_steps=0, **QUIET)
    val = CombinedLoader([DataLoader(RandomDataset(32, 4)), DataLoader(RandomDataset(32, 2))], "sequential")
    trainer.fit(Model(), CombinedLoader(loaders, "max_size_cycle"), val)
    assert trainer.global_step == 4 and trainer.num_val_batches == [4, 2]


def test_states_seed_summary_and_is_overridden() -> None:
    from ember.lightning.pytorch.trainer.states import RunningStage, TrainerFn, TrainerStatus
    from ember.lightning.pytorch.utilities.model_helpers import RequirementCache, is_overridden
    from ember.lightning.pytorch.utilities.model_summary import ModelSummary, get_human_readable_count
    from ember.lightning.pytorch.utilities.seed import isolate_rng

    seen = []

    class Model(BoringModel):
        def on_train_start(self) -> None:
            seen.append((self.trainer.state.fn == TrainerFn.FITTING, self.trainer.state.stage == RunningStage.TRAINING))

    trainer = pl.Trainer(max_steps=1, limit_val_batches=0, **QUIET)
    trainer.fit(Model())
    assert seen == [(True, True)] and trainer.state.status == TrainerStatus.FINISHED
    assert is_overridden("on_train_start", Model()) and not is_overridden("on_train_end", Model())
    assert is_overridden("training_step", BoringModel())
    torch.manual_seed(0)
    first = torch.rand(1)
    torch.manual_seed(0)
    with isolate_rng():
        torch.rand(5)
    assert torch.equal(first, torch.rand(1))
    model = BoringModel()
    model.example_input_array = torch.zeros(4, 32)
    summary = ModelSummary(model, max_depth=1)
    assert summary.layer_names == ["layer"] and summary.in_sizes == [[4, 32]] and summary.out_sizes == [[4, 2]]
    assert summary.total_parameters == 66 and get_human_readable_count(1234) == "1.2 K"
    assert bool(RequirementCache("torch>=1.0")) and not bool(RequirementCache("no-such-distribution-xyz"))


# -- core and the demos ---------------------------------------------------------------------------------------
def test_core_and_boring_classes_fit() -> None:
    from ember.lightning.pytorch.core import LightningDataModule, LightningModule
    from ember.lightning.pytorch.demos.boring_classes import DemoModel, ManualOptimBoringModel, RandomDictDataset

    assert (LightningModule, LightningDataModule) == (ember.Module, ember.DataModule)
    for model in (BoringModel(), ManualOptimBoringModel()):
        trainer = pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=2, **QUIET)
        trainer.fit(model, datamodule=BoringDataModule())
        assert trainer.global_step == 3
    trainer = pl.Trainer(max_steps=2, **QUIET)
    trainer.fit(DemoModel(), DataLoader(RandomDataset(32, 8), batch_size=4))
    assert set(RandomDictDataset(4, 2)[0]) == {"a", "b"}


# -- loggers --------------------------------------------------------------------------------------------------
def test_a_custom_logger_subclass_logs_on_embers_trainer(tmp_path: Path) -> None:
    from ember.lightning.pytorch.loggers import CSVLogger, Logger
    from ember.lightning.pytorch.loggers.logger import rank_zero_experiment

    class Recorder(Logger):
        def __init__(self) -> None:
            self.calls: list[Any] = []

        @property
        def name(self) -> str:
            return "rec"

        @property
        def version(self) -> int:
            return 0

        @property
        @rank_zero_experiment
        def experiment(self) -> str:
            return "real"

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            self.calls.append(("hparams", dict(params)))

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.calls.append(("metrics", step, sorted(metrics)))

        def finalize(self, status: str) -> None:
            self.calls.append(("finalize", status))

    class Model(BoringModel):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            out = super().training_step(batch, batch_idx)
            self.log("loss", out["loss"])
            return out

    logger = Recorder()
    trainer = pl.Trainer(max_steps=4, limit_val_batches=0, log_every_n_steps=2, accelerator="cpu", logger=logger,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(Model())
    assert trainer.logger is logger and logger.experiment == "real"
    assert logger.calls[0] == ("hparams", {"lr": 0.1}) and logger.calls[-1] == ("finalize", "success")
    assert [c[2] for c in logger.calls if c[0] == "metrics"][0] == ["epoch", "loss"]
    assert isinstance(CSVLogger(tmp_path), Logger)


# -- callbacks ------------------------------------------------------------------------------------------------
def test_lambda_callback_and_checkpoint_base() -> None:
    from ember.lightning.pytorch.callbacks import Checkpoint, LambdaCallback, ModelCheckpoint

    seen = []
    cb = LambdaCallback(on_train_epoch_end=lambda trainer, pl_module: seen.append(trainer.current_epoch),
                        on_train_batch_end=lambda t, m, outputs, batch, batch_idx: seen.append(("b", batch_idx)))
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0, callbacks=[cb], **QUIET)
    trainer.fit(BoringModel())
    assert seen == [("b", 0), ("b", 1), 0, ("b", 0), ("b", 1), 1]
    with pytest.raises(TypeError, match="no hook"):
        LambdaCallback(on_trian_end=print)
    assert isinstance(ModelCheckpoint(), Checkpoint) and not isinstance(cb, Checkpoint)


def test_base_prediction_writer_with_batch_indices() -> None:
    from ember.lightning.pytorch.callbacks import BasePredictionWriter

    class Writer(BasePredictionWriter):
        def __init__(self) -> None:
            super().__init__("batch_and_epoch")
            self.batches: list[Any] = []
            self.epoch: Any = None

        def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                               batch_idx: int, dataloader_idx: int) -> None:
            self.batches.append((batch_indices, tuple(prediction.shape)))

        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            self.epoch = (len(predictions), batch_indices)

    writer = Writer()
    trainer = pl.Trainer(callbacks=[writer], **QUIET)
    out = trainer.predict(BoringModel(), DataLoader(RandomDataset(32, 5), batch_size=2), return_predictions=False)
    assert out is None
    assert writer.batches == [([0, 1], (2, 2)), ([2, 3], (2, 2)), ([4], (1, 2))]
    assert writer.epoch == (3, [[0, 1], [2, 3], [4]])


def test_on_exception_checkpoint_saves_the_failed_fit(tmp_path: Path) -> None:
    from ember.lightning.pytorch.callbacks import OnExceptionCheckpoint

    class Failing(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    trainer = pl.Trainer(max_epochs=1, limit_val_batches=0, default_root_dir=tmp_path,
                         callbacks=[OnExceptionCheckpoint(tmp_path)], **QUIET)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Failing())
    path = tmp_path / "on_exception.ckpt"
    assert torch.load(path, weights_only=True)["global_step"] == 3
    resumed = pl.Trainer(max_steps=5, limit_val_batches=0, default_root_dir=tmp_path, **QUIET)
    resumed.fit(BoringModel(), ckpt_path=str(path))
    assert resumed.global_step == 5


def test_gradient_accumulation_scheduler() -> None:
    from ember.lightning.pytorch.callbacks import GradientAccumulationScheduler

    sched = GradientAccumulationScheduler({1: 2, 2: 4})
    trainer = pl.Trainer(max_epochs=3, limit_train_batches=8, limit_val_batches=0, callbacks=[sched], **QUIET)
    trainer.fit(BoringModel())
    assert trainer.global_step == 8 + 4 + 2 and trainer.accumulate_grad_batches == 1
    with pytest.raises(ember.core.errors.ConfigurationError, match="accumulate_grad_batches"):
        pl.Trainer(max_epochs=1, accumulate_grad_batches=2, callbacks=[GradientAccumulationScheduler({0: 2})],
                   **QUIET).fit(BoringModel())


def test_backbone_finetuning_unfreezes_at_the_epoch() -> None:
    from ember.lightning.pytorch.callbacks import BackboneFinetuning

    class WithBackbone(BoringModel):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = torch.nn.Linear(32, 32)
            self.frozen_at: list[bool] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(self.backbone(x))

        def on_train_epoch_end(self) -> None:
            self.frozen_at.append(not self.backbone.weight.requires_grad)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)

    model = WithBackbone()
    start = model.backbone.weight.detach().clone()
    trainer = pl.Trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=0,
                         callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)], **QUIET)
    trainer.fit(model)
    assert model.frozen_at == [True, False, False]
    groups = trainer.optimizers[0].param_groups
    assert len(groups) == 2 and groups[1]["lr"] == pytest.approx(0.1 * 0.1 * 1.5)
    assert not torch.equal(start, model.backbone.weight)


def test_finders_set_what_they_found() -> None:
    from ember.lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder
    from ember.lightning.pytorch.tuner import Tuner

    class Model(BoringModel):
        def __init__(self, lr: float = 0.1, batch_size: int = 2) -> None:
            super().__init__()
            self.lr, self.batch_size = lr, batch_size

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(RandomDataset(32, 64), batch_size=self.batch_size)

    model, finder = Model(), BatchSizeFinder(max_trials=3)
    trainer = pl.Trainer(max_epochs=1, limit_val_batches=0, callbacks=[finder], **QUIET)
    trainer.fit(model)
    assert finder.optimal_batch_size == model.batch_size == 8 and trainer.global_step == 64 // 8
    lr_finder = LearningRateFinder(num_training_steps=30)
    model = Model()
    pl.Trainer(max_steps=1, limit_val_batches=0, callbacks=[lr_finder], **QUIET).fit(model)
    assert lr_finder.optimal_lr is not None and len(lr_finder.optimal_lr.results["lr"]) > 0
    result = Tuner(pl.Trainer(**QUIET)).lr_find(Model(), num_training=30)
    assert result.suggestion() is not None


def test_monitors_log_and_spikes_stop(tmp_path: Path) -> None:
    from ember.lightning.pytorch.callbacks import DeviceStatsMonitor, SpikeDetection, ThroughputMonitor
    from ember.lightning.pytorch.callbacks.monitors import TrainingSpikeException
    from ember.lightning.pytorch.utilities.exceptions import MisconfigurationException

    monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch.shape[0], window_size=2)
    trainer = pl.Trainer(max_steps=3, limit_val_batches=0, callbacks=[monitor], **QUIET)
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 12), batch_size=4))
    assert trainer.callback_metrics["train/samples"] == 12
    assert "train/device/samples_per_sec" in trainer.callback_metrics
    with pytest.raises(MisconfigurationException, match="logger"):
        pl.Trainer(max_steps=1, callbacks=[DeviceStatsMonitor(cpu_stats=False)], **QUIET).fit(BoringModel())

    class Spiky(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)["loss"]
            return loss * 100 if batch_idx == 4 else loss

    spike = SpikeDetection(exclude_batches_path=tmp_path)
    pl.seed_everything(0, verbose=False)  # the data of BoringModel's loader: only batch 4 spikes on it
    with pytest.raises(TrainingSpikeException, match="batch 4"):
        pl.Trainer(max_steps=8, limit_val_batches=0, callbacks=[spike], **QUIET).fit(Spiky())
    assert spike.bad_batches == [3, 4]
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [3, 4]


def test_model_pruning_and_rich_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from ember.lightning.pytorch.callbacks import ModelPruning, RichModelSummary

    model = BoringModel()
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0,
                         callbacks=[ModelPruning("l1_unstructured", amount=0.25)], **QUIET)
    trainer.fit(model)
    zeros = int((model.layer.weight == 0).sum()) + int((model.layer.bias == 0).sum())
    assert zeros >= 0.25 * 66 and "weight_orig" not in dict(model.layer.named_parameters())
    pytest.importorskip("rich")
    pl.Trainer(max_steps=1, limit_val_batches=0, accelerator="cpu", logger=False, enable_checkpointing=False,
               enable_progress_bar=False, callbacks=[RichModelSummary()]).fit(BoringModel())
    assert "Total params" in capsys.readouterr().out


# -- profilers ------------------------------------------------------------------------------------------------
def test_profilers_time_the_run(tmp_path: Path) -> None:
    from ember.lightning.pytorch.profilers import AdvancedProfiler, PassThroughProfiler, Profiler, SimpleProfiler

    class Counting(Profiler):
        def __init__(self) -> None:
            super().__init__()
            self.started: list[str] = []

        def start(self, action_name: str) -> None:
            self.started.append(action_name)

        def stop(self, action_name: str) -> None:
            pass

    counting = Counting()
    for profiler in (SimpleProfiler(dirpath=tmp_path, filename="perf"), AdvancedProfiler(dirpath=tmp_path,
                                                                                         filename="adv"),
                     PassThroughProfiler(), counting):
        trainer = pl.Trainer(max_steps=2, limit_val_batches=1, profiler=profiler, **QUIET)
        trainer.fit(BoringModel())
    report = (tmp_path / "fit-perf.txt").read_text()
    assert "training_step" in report or "step" in report
    assert "Profile stats for" in (tmp_path / "fit-adv.txt").read_text()
    assert "[Hook]on_train_batch_start" in counting.started
    with SimpleProfiler().profile("mine"):
        pass


LIBRARY_BOUND = {
    "strategies": {"DeepSpeedStrategy": "fsdp", "ModelParallelStrategy": "fsdp"},
    "plugins.precision": {"BitsandbytesPrecision": "bf16", "DeepSpeedPrecision": "fsdp", "FSDPPrecision": "fsdp",
                          "TransformerEnginePrecision": "bf16-mixed", "XLAPrecision": "XLA"},
    "plugins.io": {"XLACheckpointIO": "TorchCheckpointIO"},
    "plugins.environments": {"KubeflowEnvironment": "torchrun", "LSFEnvironment": "torchrun",
                             "MPIEnvironment": "torchrun", "XLAEnvironment": "XLA"},
}


@pytest.mark.parametrize("module", sorted(LIBRARY_BOUND))
def test_library_bound_classes_import_and_say_what_to_use(module: str) -> None:
    """A class that needs a library ember does not run (DeepSpeed, XLA, bitsandbytes, Transformer Engine) imports,
    can be named in isinstance and subclassed, and raises when built, saying what to use."""
    from ember.lightning._names import UnsupportedError

    mod = importlib.import_module(f"ember.lightning.pytorch.{module}")
    for name, hint in LIBRARY_BOUND[module].items():
        cls = getattr(mod, name)
        assert not isinstance(object(), cls)
        with pytest.raises(UnsupportedError, match=hint):
            type("Sub", (cls,), {})()


def test_parallel_strategy_is_the_base_of_the_multi_process_ones() -> None:
    from ember.lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ParallelStrategy, SingleDeviceStrategy

    assert issubclass(DDPStrategy, ParallelStrategy) and issubclass(FSDPStrategy, ParallelStrategy)
    assert not issubclass(SingleDeviceStrategy, ParallelStrategy)


def test_find_usable_cuda_devices() -> None:
    from ember.lightning.pytorch.accelerators import find_usable_cuda_devices

    assert find_usable_cuda_devices(0) == []
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device is visible"):
            find_usable_cuda_devices(1)
    else:
        assert find_usable_cuda_devices(-1) == list(range(torch.cuda.device_count()))
        with pytest.raises(ValueError, match="visible"):
            find_usable_cuda_devices(torch.cuda.device_count() + 1)


def test_torch_sync_batchnorm_applies_and_reverts() -> None:
    from ember.lightning.pytorch.plugins import LayerSync, TorchSyncBatchNorm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    with torch.no_grad():
        model[1].running_mean += 1.0
    plugin = TorchSyncBatchNorm()
    assert isinstance(plugin, LayerSync)
    synced = plugin.apply(model)
    assert isinstance(synced[1], torch.nn.SyncBatchNorm)
    back = plugin.revert(synced)
    assert type(back[1]) is torch.nn.BatchNorm1d
    assert torch.equal(back[1].running_mean, model[1].running_mean) and back[1].weight is synced[1].weight
    back.eval()
    assert back(torch.randn(2, 4)).shape == (2, 3)
