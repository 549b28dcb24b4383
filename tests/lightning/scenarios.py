"""Loop scenarios run on Lightning (``record_loop.py``, which writes ``loop.json``) and on ember
(``tests/test_lightning_differential.py``, which compares with that file).

The module, the callback and the data are written once here, against names both frameworks have; a
:class:`Framework` says which ``Trainer``, module base and callback base to use. Nothing here imports
Lightning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

#: Trainer arguments every scenario starts from: CPU, nothing written, nothing printed.
QUIET: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
                         "enable_progress_bar": False, "enable_model_summary": False}

#: Event hooks of a callback: name -> the arguments after (trainer, module), in Lightning's order.
CALLBACK_HOOKS: dict[str, tuple[str, ...]] = {
    "setup": ("stage",), "teardown": ("stage",),
    "on_fit_start": (), "on_fit_end": (),
    "on_sanity_check_start": (), "on_sanity_check_end": (),
    "on_train_start": (), "on_train_end": (),
    "on_train_epoch_start": (), "on_train_epoch_end": (),
    "on_train_batch_start": ("batch", "batch_idx"), "on_train_batch_end": ("outputs", "batch", "batch_idx"),
    "on_validation_start": (), "on_validation_end": (),
    "on_validation_epoch_start": (), "on_validation_epoch_end": (),
    "on_validation_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_validation_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_test_start": (), "on_test_end": (), "on_test_epoch_start": (), "on_test_epoch_end": (),
    "on_test_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_test_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_predict_start": (), "on_predict_end": (), "on_predict_epoch_start": (), "on_predict_epoch_end": (),
    "on_predict_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_predict_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_exception": ("exception",),
    "on_before_backward": ("loss",), "on_after_backward": (),
    "on_before_optimizer_step": ("optimizer",), "on_before_zero_grad": ("optimizer",),
}

#: Hooks of the module (called after the callbacks' hook of the same name): name -> its arguments.
MODULE_HOOKS: dict[str, tuple[str, ...]] = {
    "prepare_data": (), "setup": ("stage",), "teardown": ("stage",), "configure_model": (),
    "on_fit_start": (), "on_fit_end": (), "on_train_start": (), "on_train_end": (),
    "on_train_epoch_start": (), "on_train_epoch_end": (),
    "on_train_batch_start": ("batch", "batch_idx"), "on_train_batch_end": ("outputs", "batch", "batch_idx"),
    "on_validation_start": (), "on_validation_end": (), "on_validation_epoch_start": (),
    "on_validation_epoch_end": (), "on_validation_model_eval": (), "on_validation_model_train": (),
    "on_validation_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_validation_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_test_start": (), "on_test_end": (), "on_test_epoch_start": (), "on_test_epoch_end": (),
    "on_test_model_eval": (), "on_test_model_train": (), "on_validation_model_zero_grad": (),
    "on_test_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_test_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_predict_start": (), "on_predict_end": (), "on_predict_epoch_start": (), "on_predict_epoch_end": (),
    "on_predict_model_eval": (),
    "on_predict_batch_start": ("batch", "batch_idx", "dataloader_idx"),
    "on_predict_batch_end": ("outputs", "batch", "batch_idx", "dataloader_idx"),
    "on_before_batch_transfer": ("batch", "dataloader_idx"), "on_after_batch_transfer": ("batch", "dataloader_idx"),
    "on_before_backward": ("loss",), "on_after_backward": (),
    "on_before_optimizer_step": ("optimizer",), "on_before_zero_grad": ("optimizer",),
}

#: Hooks whose return value is used (the batch): the recording method returns its input unchanged.
_RETURNS_BATCH = {"on_before_batch_transfer", "on_after_batch_transfer"}


@dataclass
class Framework:
    """What a scenario needs from a framework."""

    name: str
    Trainer: Any
    Module: type
    Callback: type
    seed_everything: Callable[[int], Any]


@dataclass
class Scenario:
    name: str
    #: Trainer arguments on top of QUIET.
    trainer: dict[str, Any] = field(default_factory=dict)
    #: What the module does (see make_module).
    module: dict[str, Any] = field(default_factory=dict)
    #: The runs, in order: "fit", "validate", "test".
    runs: tuple[str, ...] = ("fit",)
    train_batches: int = 4
    val_batches: int = 2
    #: Record every hook call (else only the counters, metrics and weights).
    record_calls: bool = True
    #: How many validation (and test) loaders.
    val_loaders: int = 1


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    # (a) an exception in training_step: which hooks run after it, and the trainer's state afterwards
    Scenario("exception_in_training_step", {"max_epochs": 1, "num_sanity_val_steps": 0},
             {"fail_at": 1}),
    # (b) max_steps reached in the middle of an epoch: no validation starts
    Scenario("max_steps_mid_epoch", {"max_epochs": 3, "max_steps": 3, "num_sanity_val_steps": 0}),
    # (c) should_stop set in on_train_batch_end in the middle of an epoch
    Scenario("should_stop_mid_epoch", {"max_epochs": 3, "num_sanity_val_steps": 0}, {"stop_at": 1}),
    # (d) training_step returning None under automatic optimization
    Scenario("training_step_returns_none", {"max_epochs": 1, "num_sanity_val_steps": 0}, {"none_at": (1,)}),
    Scenario("training_step_returns_none_accumulating",
             {"max_epochs": 1, "num_sanity_val_steps": 0, "accumulate_grad_batches": 2}, {"none_at": (1, 2)}),
    # (e) validation data but no validation_step
    Scenario("no_validation_step", {"max_epochs": 1}, {"validation_step": False}),
    # (f) self.log with every (on_step, on_epoch) combination, in fit, validate and test
    Scenario("log_combinations", {"max_epochs": 2, "num_sanity_val_steps": 1},
             {"log_combinations": True}, runs=("fit", "validate", "test"), record_calls=False),
    # (g) the full hook order: sanity check, validation each epoch, accumulation with an incomplete window
    Scenario("hook_order_accumulation",
             {"max_epochs": 2, "accumulate_grad_batches": 2, "num_sanity_val_steps": 1, "limit_val_batches": 1},
             runs=("fit", "validate", "test", "predict"), train_batches=3),
    # (h) the weights after a few steps
    Scenario("weights", {"max_epochs": 3, "num_sanity_val_steps": 0}, {"momentum": 0.9},
             train_batches=8, record_calls=False),
    # Trainer arguments that change the loop
    Scenario("minus_one_from_on_train_batch_start", {"max_epochs": 2, "num_sanity_val_steps": 0},
             {"end_epoch_at": 1}),
    Scenario("reload_dataloaders_every_epoch",
             {"max_epochs": 3, "reload_dataloaders_every_n_epochs": 1, "num_sanity_val_steps": 1},
             {"loaders_from_methods": True}, train_batches=2, val_batches=1),
    Scenario("overfit_batches", {"max_epochs": 2, "overfit_batches": 2, "num_sanity_val_steps": 0},
             {"shuffle": True}, train_batches=6, val_batches=3),
    Scenario("val_check_interval_half", {"max_epochs": 2, "val_check_interval": 0.5, "num_sanity_val_steps": 0},
             val_batches=1),
    Scenario("fast_dev_run", {"fast_dev_run": 2}, runs=("fit", "validate", "test"), val_batches=3),
    Scenario("limits", {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 0.5,
                        "limit_test_batches": 1, "num_sanity_val_steps": 2}, runs=("fit", "test"),
             train_batches=5, val_batches=4),
    Scenario("two_validation_loaders", {"max_epochs": 1, "num_sanity_val_steps": 0}, {"log_combinations": True},
             runs=("fit", "validate", "test"), val_loaders=2),
    Scenario("manual_optimization", {"max_epochs": 2, "num_sanity_val_steps": 0}, {"manual": True},
             val_batches=1),
    Scenario("gradient_clipping_norm", {"max_epochs": 2, "gradient_clip_val": 0.05, "num_sanity_val_steps": 0},
             record_calls=False),
    Scenario("gradient_clipping_value", {"max_epochs": 2, "gradient_clip_val": 0.01,
                                         "gradient_clip_algorithm": "value", "num_sanity_val_steps": 0},
             record_calls=False),
]}


def data(n_batches: int, seed: int, shuffle: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_batches * 2, 4, generator=g)
    y = torch.randint(0, 2, (n_batches * 2,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=2, shuffle=shuffle)


def describe(value: Any) -> Any:
    """A JSON-able summary of a hook argument: tensors by shape and dtype, numbers and strings by value."""
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)}:{str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, torch.optim.Optimizer):
        return f"optimizer {type(value).__name__}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *(describe(v) for v in value)]
    return type(value).__name__


def _method(name: str, params: tuple[str, ...], first: tuple[str, ...], record: str) -> Callable:
    """A method ``name(self, *first, *params)`` that records its call (by name, so that a framework passing
    arguments by position and one passing them by keyword both reach it)."""
    args = ", ".join(("self", *first, *(p + "=0" if p == "dataloader_idx" else p for p in params)))
    ret = "batch" if name in _RETURNS_BATCH else "answer"
    source = (f"def {name}({args}):\n"
              f"    answer = self._record({record!r}, {name!r}, {{{', '.join(f'{p!r}: {p}' for p in params)}}})\n"
              f"    return {ret}\n")
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # noqa: S102  (a fixed template over the names above)
    return namespace[name]


def make_callback(fw: Framework, log: list) -> Any:
    def _record(self: Any, who: str, name: str, args: dict[str, Any]) -> None:
        log.append(_entry(self.trainer_ref, who, name, args))

    ns: dict[str, Any] = {"_record": _record, "trainer_ref": None}
    for name, params in CALLBACK_HOOKS.items():
        ns[name] = _method(name, params, ("trainer", "module"), "callback")
    # remember the trainer so that _record can read its counters
    inner_setup = ns["setup"]

    def setup(self: Any, trainer: Any, module: Any, stage: str) -> None:
        self.trainer_ref = trainer
        inner_setup(self, trainer, module, stage)

    ns["setup"] = setup
    return type("Recorder", (fw.Callback,), ns)()


def _entry(trainer: Any, who: str, name: str, args: dict[str, Any]) -> list:
    step = trainer.global_step if trainer is not None else None
    epoch = trainer.current_epoch if trainer is not None else None
    stage = getattr(trainer.state.stage, "value", trainer.state.stage) if trainer is not None else None
    return [f"{who}.{name}", {k: describe(v) for k, v in args.items()}, step, epoch, stage]


def make_module(fw: Framework, log: list | None, *, fail_at: int | None = None, stop_at: int | None = None,
                none_at: tuple[int, ...] = (), validation_step: bool = True, log_combinations: bool = False,
                momentum: float = 0.0, end_epoch_at: int | None = None, loaders_from_methods: bool = False,
                shuffle: bool = False, train_batches: int = 4, val_batches: int = 2, manual: bool = False) -> Any:
    """The scenario's module, on ``fw.Module``; hooks it calls are appended to ``log`` (None: not recorded)."""

    def __init__(self: Any) -> None:
        fw.Module.__init__(self)
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 2)
        self.log_errors: dict[str, str] = {}
        if manual:
            self.automatic_optimization = False

    def _record(self: Any, who: str, name: str, args: dict[str, Any]) -> Any:
        if log is not None:
            log.append(_entry(self._trainer_or_none(), who, name, args))
        if name == "on_train_batch_end" and stop_at is not None and args["batch_idx"] == stop_at:
            self.trainer.should_stop = True
        if name == "on_train_batch_start" and args["batch_idx"] == end_epoch_at:
            return -1
        return None

    def train_dataloader(self: Any) -> DataLoader:
        self._record("module", "train_dataloader", {})
        return data(train_batches, 1)

    def val_dataloader(self: Any) -> DataLoader:
        self._record("module", "val_dataloader", {})
        return data(val_batches, 2)

    def _trainer_or_none(self: Any) -> Any:
        try:
            return self.trainer
        except RuntimeError:
            return None

    def _log_all(self: Any, stage: str) -> None:
        for on_step in (True, False):
            for on_epoch in (True, False):
                name = f"{stage}_s{int(on_step)}_e{int(on_epoch)}"
                try:
                    self.log(name, float(self.global_step + 1), on_step=on_step, on_epoch=on_epoch)
                except Exception as exc:  # recorded: which combinations a framework refuses
                    self.log_errors[name] = type(exc).__name__
        self.log(f"{stage}_default", 1.5)

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        self._record("module", "training_step", {"batch": batch, "batch_idx": batch_idx})
        if batch_idx == fail_at:
            raise RuntimeError("boom in training_step")
        if log_combinations:
            self._log_all("train")
        if batch_idx in none_at:
            return None
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        if manual:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def _eval_step(self: Any, stage: str, batch: Any, batch_idx: int) -> None:
        self._record("module", f"{stage}_step", {"batch": batch, "batch_idx": batch_idx})
        if log_combinations:
            self._log_all("val" if stage == "validation" else stage)
        x, y = batch
        self.log(f"{stage}_loss", torch.nn.functional.cross_entropy(self(x), y))

    def validation_step_(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        _eval_step(self, "validation", batch, batch_idx)

    def test_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        _eval_step(self, "test", batch, batch_idx)

    def predict_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        self._record("module", "predict_step", {"batch": batch, "batch_idx": batch_idx})
        return self(batch[0])

    def configure_optimizers(self: Any) -> Any:
        self._record("module", "configure_optimizers", {})
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=momentum)

    ns: dict[str, Any] = {"__init__": __init__, "_record": _record, "_trainer_or_none": _trainer_or_none,
                          "_log_all": _log_all, "forward": forward, "training_step": training_step,
                          "test_step": test_step, "predict_step": predict_step,
                          "configure_optimizers": configure_optimizers}
    if validation_step:
        ns["validation_step"] = validation_step_
    if loaders_from_methods:
        ns["train_dataloader"], ns["val_dataloader"] = train_dataloader, val_dataloader
    if log is not None:
        for name, params in MODULE_HOOKS.items():
            ns[name] = _method(name, params, (), "module")
    elif stop_at is not None:
        ns["on_train_batch_end"] = _method("on_train_batch_end", MODULE_HOOKS["on_train_batch_end"], (), "module")
    return type("Model", (fw.Module,), ns)()


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(metrics.items())}


def _state(trainer: Any) -> dict[str, Any]:
    state = trainer.state
    value = lambda v: getattr(v, "value", v)  # noqa: E731  (Lightning's enums)
    return {"fn": value(state.fn), "stage": value(state.stage), "status": value(state.status),
            "finished": bool(state.finished)}


def run(fw: Framework, scenario: Scenario) -> dict[str, Any]:
    """Run ``scenario`` on ``fw``; returns what happened, as JSON-able data."""
    fw.seed_everything(0)
    log: list = []
    calls = log if scenario.record_calls else None
    options = dict(scenario.module)
    shuffle, from_methods = options.pop("shuffle", False), options.get("loaders_from_methods", False)
    module = make_module(fw, calls, **options, train_batches=scenario.train_batches,
                         val_batches=scenario.val_batches)
    callbacks = [make_callback(fw, log)] if scenario.record_calls else []
    trainer = fw.Trainer(**{**QUIET, **scenario.trainer}, callbacks=callbacks)
    train, val = data(scenario.train_batches, 1, shuffle), data(scenario.val_batches, 2)
    if scenario.val_loaders > 1:
        val = [data(scenario.val_batches, 2 + i) for i in range(scenario.val_loaders)]
    if from_methods:
        train = val = None
    out: dict[str, Any] = {"runs": []}
    for fn in scenario.runs:
        start = len(log)
        record: dict[str, Any] = {"fn": fn}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if fn == "fit":
                    trainer.fit(module, train, val)
                elif fn == "predict":
                    record["returned"] = describe(trainer.predict(module, val))
                else:
                    returned = getattr(trainer, fn)(module, val, verbose=False)
                    record["returned"] = [_floats(d) for d in returned]
            except Exception as exc:
                record["exception"] = describe(exc)
        record["warnings"] = sorted({str(w.message) for w in caught})
        record["calls"] = log[start:]
        record["callback_metrics"] = _floats(trainer.callback_metrics)
        record["logged_metrics"] = sorted(trainer.logged_metrics)
        record["global_step"] = trainer.global_step
        record["current_epoch"] = trainer.current_epoch
        record["state"] = _state(trainer)
        out["runs"].append(record)
    out["log_errors"] = module.log_errors
    out["weights"] = {k: v.tolist() for k, v in module.state_dict().items()}
    return out
