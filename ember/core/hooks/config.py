"""The Trainer's arguments as one validated, frozen attrs record."""

from __future__ import annotations

import datetime
import logging
import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ember.core.errors import ConfigurationError, UnknownArgumentError, suggest
from ember.core.hooks import trainer_args

_log = logging.getLogger("ember")

#: Lightning's short precision spellings, accepted for porting.
PRECISION_ALIASES = {
    "32": "32-true", 32: "32-true", "64": "64-true", 64: "64-true", "16": "16-mixed", 16: "16-mixed",
    "bf16": "bf16-mixed", "half": "16-true", "double": "64-true",
}


class _TypeFail(ConfigurationError, TypeError):
    """A Trainer argument of the wrong type: a ``TypeError`` too (as Lightning raises for it)."""


def _fail(name: str, value: Any, allowed: str) -> ConfigurationError:
    return ConfigurationError(f"Trainer({name}={value!r}) is invalid: {allowed}.")


def _non_negative_int(name: str, minimum: int = 0, none_ok: bool = False) -> Any:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and none_ok:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            if minimum == -1:
                says = f"`{name}` must be a non-negative integer or -1"
            elif not isinstance(value, int) or isinstance(value, bool):
                says = f"`{name}` should be an integer, found {value!r}: it should be an int >= {minimum}"
            else:
                says = f"`{name}` should be an int >= {minimum}"
            raise _fail(name, value, f"expected an integer >= {minimum}" + (" or None" if none_ok else "")
                        + f" ({says})")

    return check


def _whole_count(value: Any) -> Any:
    """A float limit above 1.0 with no fractional part (``1e50``, ``10.0``) counts batches, as in Lightning."""
    if type(value) is float and value > 1.0 and value.is_integer():
        return int(value)
    return value


def _limit(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        raise _fail(attribute.name, value, "expected an int >= 0 (batches) or a float in [0.0, 1.0] (fraction)")
    if isinstance(value, int) and value >= 0:
        return
    if isinstance(value, float) and 0.0 <= value <= 1.0:
        return
    raise _fail(attribute.name, value, "passed invalid value; expected an int >= 0 (batches) or a float in "
                "[0.0, 1.0] (fraction)")


def _val_check_interval(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if trainer_args.is_time_interval(value):
        trainer_args.interval_seconds(value)  # raises naming what is wrong with it
        return
    if isinstance(value, float) and 0.0 < value <= 1.0:
        return
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return
    raise _fail("val_check_interval", value, "passed invalid value; expected a float in (0.0, 1.0] (fraction of "
                "an epoch) or an int > 0 (every N training batches)")


def _precision(value: Any) -> Any:
    if value is None:  # Lightning's default
        return "32-true"
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return PRECISION_ALIASES.get(value, value)
    return value


#: Lightning's device-neutral accelerator spelling: "gpu" means the CUDA accelerator.
ACCELERATOR_ALIASES = {"gpu": "cuda"}


def _accelerator(value: Any) -> Any:
    value = _auto_if_none(value)
    return ACCELERATOR_ALIASES.get(value, value) if isinstance(value, str) else value


def _auto_if_none(value: Any) -> Any:
    return "auto" if value is None else value


def _role_arg(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A role argument is a plugin name (or identity), or a plugin object of that role."""
    role = attribute.name
    if isinstance(value, str):
        return
    if isinstance(value, type):
        raise ConfigurationError(f"Trainer({role}={value.__name__}) is invalid: that is a class; pass an instance, "
                                 f"{value.__name__}(), or a plugin name such as {_ROLE_EXAMPLES[role]}.")
    if isinstance(value, (bool, int, float)):
        raise ConfigurationError(
            f"Trainer({role}={value!r}) is invalid: expected the name of an installed {role} plugin "
            f"(a string such as {_ROLE_EXAMPLES[role]}) or a {role} plugin object.")
    declared = getattr(value, "role", role)
    if declared != role:
        raise ConfigurationError(f"Trainer({role}={value!r}) is invalid: that plugin's role is {declared!r}, not "
                                 f"{role!r}; pass it as {declared}=... or in plugins=[...].")


_ROLE_EXAMPLES = {"accelerator": "'auto', 'cpu' or 'cuda'", "strategy": "'auto', 'single_device' or 'ddp'",
                  "precision": "'32-true' or 'bf16-mixed'", "environment": "'auto', 'torchrun' or 'slurm'",
                  "checkpoint_io": "'torch'"}


def _plugin_objects(instance: Any, attribute: attrs.Attribute, value: tuple) -> None:
    for item in value:
        if isinstance(item, type):
            raise ConfigurationError(f"Trainer({attribute.name}=[..., {item.__name__}, ...]) holds a class: pass an "
                                     f"instance, {item.__name__}().")
        if item is None or isinstance(item, (bool, int, float)):
            raise ConfigurationError(f"Trainer({attribute.name}=[..., {item!r}, ...]) is invalid: expected plugin "
                                     "names (such as 'early-stopping' or 'callback.early-stopping') or plugin "
                                     "objects (with @ember.hookimpl methods or methods named like hooks).")
        if not isinstance(item, str):
            _check_implements_a_hook(attribute.name, item)


def _check_implements_a_hook(argument: str, item: Any) -> None:
    """An object passed as a callback or plugin that implements no hook would never be called: an error."""
    from ember.core.hooks.plugin_manager import implemented_hooks, misspelled_hooks

    if isinstance(getattr(item, "role", None), str) or implemented_hooks(item):
        return  # a role plugin is selected for its role; core's defaults answer the hooks it leaves out
    shown = repr(item)
    shown = shown if len(shown) <= 80 and "\n" not in shown else f"a {type(item).__name__} object"
    typos = " ".join(f"Its method {name!r} is not a hook.{close}" for name, close in misspelled_hooks(item))
    raise ConfigurationError(
        f"Trainer({argument}=[..., {shown}, ...]) is invalid: {type(item).__name__} implements no ember hook, "
        "so it would never be called. A plugin or callback has @ember.hookimpl methods or methods named like "
        f"event hooks (on_train_epoch_end, ...); `ember hooks` lists them.{' ' + typos if typos else ''}")


def _fast_dev_run(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or (isinstance(value, int) and value >= 0):
        return
    raise _fail("fast_dev_run", value, "expected a bool or an int >= 0 (number of batches); it should be >= 0")


def _clip_algorithm(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in (None, "norm", "value"):
        raise _fail("gradient_clip_algorithm", value, f"`gradient_clip_algorithm` {value} is invalid; expected 'norm' or "
                    "'value'" + suggest(value, ["norm", "value"]))


def _clip_val(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _TypeFail(str(_fail("gradient_clip_val", value, "expected a finite number >= 0 (0 or None: no clipping; "
                                  f"`gradient_clip_val` should be an int or a float, got {type(value).__name__})")))
    if not 0 <= value < float("inf"):
        # NaN or infinity would clip every gradient to NaN (or not at all) without a word
        raise _fail("gradient_clip_val", value, "expected a finite number >= 0 (0 or None: no clipping)")


def _root_dir(value: Any) -> str:
    """``default_root_dir``: ``~`` expanded in a local path; a URL (``s3://...``) kept as it is."""
    path = os.fspath(value)
    return path if "://" in path else os.path.expanduser(path)


def _names(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    for item in value:
        if not isinstance(item, str):
            raise ConfigurationError(f"Trainer({attribute.name}=[..., {item!r}, ...]) is invalid: expected a list of "
                                     "plugin identities (strings such as 'precision.bf16-mixed').")


def _optional_bool(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise _fail(attribute.name, value, "expected True, False or None (None: use the environment variable)")


def _bool(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, bool):
        raise _fail(attribute.name, value, "expected True or False")


def _trace(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None or isinstance(value, (bool, str, os.PathLike)) or callable(getattr(value, "write", None)):
        return
    raise _fail("trace", value, "expected True/'stderr', 'stdout', a path for JSON lines, a text stream, or "
                "False/None (None: use the EMBER_TRACE environment variable)")


def _tuple(value: Any) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def _str_names(value: Any) -> tuple:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return _tuple(value)


_DURATION = re.compile(r"^(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})$")
_DURATION_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds")


def parse_duration(value: Any, name: str = "max_time") -> datetime.timedelta | None:
    """A duration from a ``timedelta``, a ``"DD:HH:MM:SS"`` string, a dict of ``timedelta`` keywords
    (``{"hours": 2}``) or a number of seconds; None stays None."""
    if value is None or isinstance(value, datetime.timedelta):
        return value
    allowed = ("expected a timedelta, a string in the format DD:HH:MM:SS, a dict such as {'hours': 2} "
               "or a number of seconds")
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match:
            d, h, m, s = (int(g) for g in match.groups())
            return datetime.timedelta(days=d, hours=h, minutes=m, seconds=s)
        raise _fail(name, value, allowed)
    if isinstance(value, dict):
        unknown = [k for k in value if k not in _DURATION_KEYS]
        if unknown:
            raise _fail(name, value, f"unknown key {unknown[0]!r}{suggest(unknown[0], _DURATION_KEYS)}; {allowed}")
        return datetime.timedelta(**value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return datetime.timedelta(seconds=value)
    raise _fail(name, value, allowed)


def _logger(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, bool) and isinstance(value, (list, tuple)):
            raise _fail("logger", value, "a list holds logger names or logger objects, not booleans")
        if item is not None and not isinstance(item, (bool, str)) and not callable(getattr(item, "log_metrics", None)):
            raise _fail("logger", value, "expected True (the default logger: TensorBoard when installed, else CSV), False/None (no logger), a logger "
                        "name such as 'csv' or 'tensorboard', a logger object with log_metrics(), or a list of these")


def _profiler(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if isinstance(value, (bool, int, float, type)):
        raise _fail("profiler", value, "expected None (no profiler), a profiler name such as 'simple' or 'torch' "
                    "(or an identity such as 'profiler.simple'), or a profiler object (an instance)")


@attrs.frozen(kw_only=True)
class TrainerConfig:
    """Every Trainer argument, validated on construction. Errors name the argument and what is allowed."""

    accelerator: Any = attrs.field(default="auto", converter=_accelerator, validator=_role_arg)
    strategy: Any = attrs.field(default="auto", converter=_auto_if_none, validator=_role_arg)
    devices: Any = "auto"
    num_nodes: int = attrs.field(default=1, validator=_non_negative_int("num_nodes", 1))
    precision: Any = attrs.field(default="32-true", converter=_precision, validator=_role_arg)
    environment: Any = attrs.field(default="auto", converter=_auto_if_none, validator=_role_arg)
    checkpoint_io: Any = attrs.field(default="torch", converter=lambda v: "torch" if v is None else v,
                                     validator=_role_arg)
    callbacks: tuple = attrs.field(default=(), converter=_tuple, validator=_plugin_objects)
    plugins: tuple = attrs.field(default=(), converter=_tuple, validator=_plugin_objects)
    max_epochs: int | None = attrs.field(default=None, validator=_non_negative_int("max_epochs", -1, True))
    min_epochs: int | None = attrs.field(default=None, validator=_non_negative_int("min_epochs", 0, True))
    max_steps: int = attrs.field(default=-1, validator=_non_negative_int("max_steps", -1))
    min_steps: int | None = attrs.field(default=None, validator=_non_negative_int("min_steps", 0, True))
    limit_train_batches: int | float | None = attrs.field(default=None, converter=_whole_count, validator=_limit)
    limit_val_batches: int | float | None = attrs.field(default=None, converter=_whole_count, validator=_limit)
    limit_test_batches: int | float | None = attrs.field(default=None, converter=_whole_count, validator=_limit)
    limit_predict_batches: int | float | None = attrs.field(default=None, converter=_whole_count, validator=_limit)
    val_check_interval: int | float | str | dict | datetime.timedelta | None = attrs.field(
        default=None, validator=_val_check_interval)
    check_val_every_n_epoch: int | None = attrs.field(
        default=1, validator=_non_negative_int("check_val_every_n_epoch", 1, True))
    num_sanity_val_steps: int = attrs.field(default=2, converter=lambda v: 2 if v is None else v,
                                            validator=_non_negative_int("num_sanity_val_steps", -1))
    fast_dev_run: bool | int = attrs.field(default=False, validator=_fast_dev_run)
    accumulate_grad_batches: int = attrs.field(
        default=1, validator=_non_negative_int("accumulate_grad_batches", 1))
    gradient_clip_val: float | None = attrs.field(default=None, validator=_clip_val)
    gradient_clip_algorithm: str | None = attrs.field(default=None, validator=_clip_algorithm)
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    overfit_batches: int | float = attrs.field(default=0.0, converter=_whole_count, validator=_limit)
    reload_dataloaders_every_n_epochs: int = attrs.field(
        default=0, validator=_non_negative_int("reload_dataloaders_every_n_epochs"))
    detect_anomaly: bool = attrs.field(default=False, validator=_bool)
    sync_batchnorm: bool = attrs.field(default=False, validator=_bool)
    use_distributed_sampler: bool = attrs.field(default=True, validator=_bool)
    barebones: bool = attrs.field(default=False, validator=_bool)
    enable_autolog_hparams: bool = attrs.field(default=True, validator=_bool)
    default_root_dir: str = attrs.field(default=None, converter=lambda v: _root_dir(v) if v else os.getcwd())
    log_every_n_steps: int = attrs.field(default=50, converter=lambda v: 50 if v is None else v,
                                         validator=_non_negative_int("log_every_n_steps", 1))
    #: In a run its launcher may restart (ember.core.checkpointing.restarts): save the resumable "last"
    #: checkpoint every N optimizer steps, in the background; 0: only what the checkpoint callbacks save.
    restart_save_every_n_steps: int = attrs.field(default=100, validator=_non_negative_int("restart_save_every_n_steps"))
    block_plugins: tuple = attrs.field(default=(), converter=_str_names, validator=_names)
    autoload_plugins: bool = True
    logger: Any = attrs.field(default=True, validator=_logger)
    profiler: Any = attrs.field(default=None, validator=_profiler)
    #: An always-on plugin that cannot be loaded is an error (True) or a warning (False); None: the
    #: EMBER_STRICT_PLUGINS environment variable decides (default: warning).
    strict_plugins: bool | None = attrs.field(default=None, validator=_optional_bool)
    #: Hook tracing (see ember.core.hooks.tracing); None: the EMBER_TRACE environment variable decides (default: off).
    trace: Any = attrs.field(default=None, validator=_trace)
    #: The arguments plugins declare (see :mod:`ember.core.hooks.options`), checked by their declarations: every one
    #: is here, given or default, and reads as an attribute (``config.max_time``).
    plugin_options: Mapping[str, Any] = attrs.field(factory=lambda: _declared_defaults(),
                                                     converter=lambda v: MappingProxyType(dict(v)))

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its arguments (``pickle.dumps(trainer)``): the read-only view of ``plugin_options`` is not
        picklable itself."""
        values = {f.name: object.__getattribute__(self, f.name) for f in attrs.fields(TrainerConfig)}
        values["plugin_options"] = dict(values["plugin_options"])
        return _config_from, (values,)

    def __getattr__(self, name: str) -> Any:  # only reached for names that are not fields: plugins' arguments
        try:
            return object.__getattribute__(self, "plugin_options")[name]
        except KeyError:
            raise AttributeError(f"TrainerConfig has no argument {name!r}") from None

    def __attrs_post_init__(self) -> None:
        vci = self.val_check_interval
        if self.check_val_every_n_epoch is None and not isinstance(vci, int) \
                and not trainer_args.is_time_interval(vci):
            raise _fail("check_val_every_n_epoch", None,
                        "None is only allowed with an int val_check_interval (validation every N batches "
                        "counted across epochs) or a time-based one (`val_check_interval` should be an integer or a "
                        "time-based duration (str 'DD:HH:MM:SS', datetime.timedelta, or dict kwargs for timedelta) "
                        "when `check_val_every_n_epoch=None`.)")
        if self.deterministic not in (None, True, False, "warn"):
            raise _fail("deterministic", self.deterministic, "expected True, False, 'warn' or None")

    @property
    def val_check_seconds(self) -> float | None:
        """Seconds between validations for a time-based ``val_check_interval`` (None otherwise, and under
        ``fast_dev_run``)."""
        if self.fast_dev_run or not trainer_args.is_time_interval(self.val_check_interval):
            return None
        return trainer_args.interval_seconds(self.val_check_interval)

    @property
    def fast_dev_batches(self) -> int:
        """Batches per stage under ``fast_dev_run`` (0 when off)."""
        if self.fast_dev_run is True:
            return 1
        return int(self.fast_dev_run) if self.fast_dev_run else 0


#: Core's own Trainer arguments (plugins declare theirs: :mod:`ember.core.hooks.options`).
def _config_from(values: dict[str, Any]) -> TrainerConfig:
    return TrainerConfig(**values)


FIELDS = tuple(f.name for f in attrs.fields(TrainerConfig) if f.name != "plugin_options")


def make_config(kwargs: dict[str, Any]) -> TrainerConfig:
    """Build the config, turning an unknown keyword into an error with the closest valid one. Core's arguments
    are checked by :class:`TrainerConfig`, the plugins' by their declarations."""
    from ember.core.hooks import options

    declared = {o.name: o for o in options.declarations().of_plugins()}
    names = FIELDS + tuple(declared)
    kwargs = {**trainer_args.env_defaults(names), **kwargs}  # PL_TRAINER_<NAME>: defaults; passed values win
    for key in kwargs:
        if key in LIGHTNING_ELSEWHERE:
            if kwargs[key] is not None:
                raise ConfigurationError(f"Trainer({key}={kwargs[key]!r}) is a Lightning argument ember does not "
                                         f"take: {LIGHTNING_ELSEWHERE[key]}")
            continue
        if key not in names:
            raise UnknownArgumentError(
                f"Trainer.__init__() got an unexpected keyword argument {key!r}.{suggest(key, names)} "
                f"Valid arguments: {', '.join(names)}."
            )
    kwargs = {k: v for k, v in kwargs.items() if k not in LIGHTNING_ELSEWHERE}  # only None gets here: off
    passed = dict(kwargs)
    if kwargs.get("barebones"):
        trainer_args.barebones(kwargs, declared)
    if kwargs.get("overfit_batches"):
        trainer_args.overfit_limits(kwargs)
    plugin_values = {name: kwargs.pop(name) if name in kwargs else o.default for name, o in declared.items()}
    for name, option in declared.items():  # Lightning's None for a switch: its default
        if plugin_values[name] is None and isinstance(option.default, bool):
            plugin_values[name] = option.default
    for name, option in declared.items():
        if option.validate is not None and plugin_values[name] is not option.default:
            option.validate(plugin_values[name])
    config = TrainerConfig(**kwargs, plugin_options=plugin_values)
    trainer_args.say_whole_limits(passed)
    return config


#: Lightning Trainer arguments ember does not take, each with the ember way to get what it does.
LIGHTNING_ELSEWHERE = {
    "model_registry": "ember has no model-registry upload; save with ModelCheckpoint (or "
                      "trainer.save_checkpoint) and upload the file with your registry's own client.",
}

def _declared_defaults() -> dict[str, Any]:
    """The defaults of the arguments plugins declare (a TrainerConfig built directly, not by a Trainer)."""
    from ember.core.hooks import options

    return {option.name: option.default for option in options.declarations().of_plugins()}


def core_options() -> list[Any]:
    """Core's own Trainer arguments as :class:`ember.core.hooks.options.Option` records (name, type, default, help)."""
    from ember.core.hooks.options import Option

    return [Option(f.name, _type_name(f.type), f.default, CORE_HELP.get(f.name, ""))
            for f in attrs.fields(TrainerConfig) if f.name != "plugin_options"]


def _type_name(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


#: What each of core's arguments does, in a line (``ember fit --help``, ``declared_options``).
CORE_HELP = {
    "accelerator": "where to compute: auto, cpu, cuda, mps, or another installed accelerator plugin",
    "strategy": "how to spread work over processes: auto, single_device, ddp, ...",
    "devices": "how many devices (or which): auto, 1, [0, 1], '0,1'",
    "num_nodes": "number of machines",
    "precision": "32-true, 16-mixed, bf16-mixed, 16-true, bf16-true, 64-true",
    "environment": "the cluster environment: auto, torchrun, slurm, local",
    "checkpoint_io": "the checkpoint storage plugin: torch",
    "callbacks": "callbacks by name (lr-monitor) or {class_path: ..., init_args: {...}}",
    "plugins": "more plugins by identity (precision.bf16-mixed) or {class_path: ..., init_args: {...}}",
    "max_epochs": "stop after this many epochs (default 1000 unless max_steps is set; -1: no limit)",
    "min_epochs": "train at least this many epochs even if a callback asks to stop",
    "max_steps": "stop after this many optimizer steps (-1: no limit)",
    "min_steps": "train at least this many optimizer steps",
    "limit_train_batches": "batches per training epoch: an int, or a fraction of the loader",
    "limit_val_batches": "batches per validation run: an int, or a fraction",
    "limit_test_batches": "batches per test run: an int, or a fraction",
    "limit_predict_batches": "batches per predict run: an int, or a fraction",
    "val_check_interval": "validate every fraction of an epoch (float) or every N training batches (int)",
    "check_val_every_n_epoch": "validate every N epochs",
    "num_sanity_val_steps": "validation batches to run before training (-1: all)",
    "fast_dev_run": "run N batches (true: 1) of every stage, to check the code",
    "accumulate_grad_batches": "accumulate gradients over N batches per optimizer step",
    "gradient_clip_val": "clip gradients at this value",
    "gradient_clip_algorithm": "norm or value",
    "deterministic": "use deterministic algorithms (true, false, warn)",
    "benchmark": "cudnn.benchmark",
    "inference_mode": "evaluate under torch.inference_mode (false: torch.no_grad)",
    "overfit_batches": "train and validate on this many training batches (int) or fraction, unshuffled",
    "reload_dataloaders_every_n_epochs": "call the *_dataloader() methods again every N epochs (0: once)",
    "detect_anomaly": "run the fit under torch.autograd.set_detect_anomaly (slow; finds NaN sources)",
    "sync_batchnorm": "turn BatchNorm layers into SyncBatchNorm when training on several processes",
    "use_distributed_sampler": "give each process its shard of the data with a distributed sampler",
    "barebones": "no logger, checkpointing, progress bar or model summary: the loop alone",
    "enable_autolog_hparams": "hand the module's and DataModule's hparams to the loggers at fit start",
    "default_root_dir": "where logs and checkpoints go (default: the current directory)",
    "log_every_n_steps": "write step metrics to the loggers every N optimizer steps",
    "restart_save_every_n_steps": "in a run that may be restarted (ember run --max-restarts), save the last "
                                  "checkpoint every N optimizer steps, in the background (0: off)",
    "block_plugins": "plugin identities never to register",
    "autoload_plugins": "register the always-on plugins of installed packages",
    "logger": "true (the default logger), false, a name (csv, tensorboard), or a list of them",
    "profiler": "a profiler name (simple, torch) or object",
    "strict_plugins": "an always-on plugin that cannot be loaded is an error (true) or a warning",
    "trace": "write every hook call as a JSON line: true/stderr, stdout, or a file path",
}
