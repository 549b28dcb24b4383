"""``LightningCLI`` on ember's jsonargparse CLI (:mod:`ember.cli_config`): a ``main.py`` holding
``LightningCLI(MyModel, MyDataModule)`` gives ``python main.py fit|validate|test|predict`` with ``--config``,
``--print_config``, ``--model.*``, ``--data.*``, ``--trainer.*`` (every ember Trainer argument), ``--optimizer``,
``--lr_scheduler`` and ``--seed_everything``, and writes the run's configuration to ``config.yaml`` in its log
folder; ``run=False`` parses without subcommands and leaves the call to you
(``cli.trainer.fit(cli.model, datamodule=cli.datamodule)``). A subclass's hooks are called where Lightning calls
them: ``add_arguments_to_parser`` (once per parser), ``before_instantiate_classes``, ``instantiate_classes``,
``after_instantiate_classes``, ``before_<subcommand>``/``after_<subcommand>``, and a method named like the
subcommand replaces the Trainer's. See docs/cli.md.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable, Iterable
from functools import partial, update_wrapper
from types import MethodType
from typing import Any

import torch
from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from ember.cli_config import DataModule, Model, keep_unset, option_type, trainer_kwargs
from ember.core.api.trainer import Trainer
from ember.core.hooks.options import declared_options
from ember.core.hooks.positional import defines
from ember.core.loop.seed import seed_everything
from ember.hookspecs import hookimpl
from ember.lightning import Callback, LightningDataModule, LightningModule
from ember.lightning._names import lightning_trainer
from ember.lightning.pytorch.utilities.exceptions import MisconfigurationException
from ember.lightning.pytorch.utilities.model_helpers import RequirementCache, is_overridden
from ember.lightning.pytorch.utilities.rank_zero import rank_zero_warn
from ember.version import __version__

__all__ = ["ArgsType", "Callback", "LRScheduler", "LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple",
           "LRSchedulerTypeUnion", "LightningArgumentParser", "LightningCLI", "LightningDataModule", "LightningModule",
           "MisconfigurationException", "Optimizer", "OptimizerCallable", "ReduceLROnPlateau", "RequirementCache",
           "SaveConfigCallback", "instantiate_class", "is_overridden", "rank_zero_warn"]

# Lightning's type names, for annotating a module's arguments (``optimizer: OptimizerCallable = torch.optim.Adam``).
Optimizer = torch.optim.Optimizer
LRScheduler = torch.optim.lr_scheduler.LRScheduler
ReduceLROnPlateau = torch.optim.lr_scheduler.ReduceLROnPlateau
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerType = type[LRScheduler] | type[ReduceLROnPlateau]
OptimizerCallable = Callable[[Iterable], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], LRScheduler | ReduceLROnPlateau]
ArgsType = list[str] | dict[str, Any] | Namespace | None
_LR_SCHEDULERS = LRSchedulerTypeTuple


class LightningArgumentParser(ArgumentParser):
    """jsonargparse's ``ArgumentParser`` with Lightning's additions: :meth:`add_lightning_class_args`,
    :meth:`add_optimizer_args` and :meth:`add_lr_scheduler_args`."""

    def __init__(self, *args: Any, description: str = "Lightning Trainer command line tool", env_prefix: str = "PL",
                 default_env: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []
        self._optimizers: dict[str, tuple[type | tuple[type, ...], str]] = {}
        self._lr_schedulers: dict[str, tuple[type | tuple[type, ...], str]] = {}

    @property
    def optimizer_groups(self) -> dict[str, tuple[type | tuple[type, ...], str]]:
        """The optimizer groups added (``_optimizers`` in Lightning): key -> (class or classes, ``link_to``)."""
        return self._optimizers

    @property
    def lr_scheduler_groups(self) -> dict[str, tuple[type | tuple[type, ...], str]]:
        """The scheduler groups added (``_lr_schedulers`` in Lightning): key -> (class or classes, ``link_to``)."""
        return self._lr_schedulers

    def add_lightning_class_args(self, lightning_class: Any, nested_key: str, subclass_mode: bool = False,
                                 required: bool = True) -> list[str]:
        """The arguments of a Trainer (ember's Trainer arguments), module, DataModule or callback class under
        ``nested_key``; a callback's key is kept in :attr:`callback_keys` (the callback goes to the Trainer)."""
        from ember.lightning import Callback

        if isinstance(lightning_class, type) and issubclass(lightning_class, Trainer):
            names = []
            for option in declared_options():
                default = list(option.default) if isinstance(option.default, tuple) else option.default
                self.add_argument(f"--{nested_key}.{option.name}", type=option_type(option), default=default,
                                  help=option.help or option.name)
                names.append(f"{nested_key}.{option.name}")
            return names
        if isinstance(lightning_class, type) and issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(lightning_class, nested_key, fail_untyped=False,  # type: ignore[no-any-return]
                                               required=required and lightning_class is not Model)
        return self.add_class_arguments(lightning_class, nested_key, fail_untyped=False,  # type: ignore[no-any-return]
                                        sub_configs=True)

    def add_optimizer_args(self, optimizer_class: type | tuple[type, ...] = (torch.optim.Optimizer,),
                           nested_key: str = "optimizer", link_to: str = "AUTOMATIC") -> None:
        """``--optimizer`` (a class, or any subclass of a tuple's classes) without ``params``."""
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {"params"}}
        if isinstance(optimizer_class, tuple):
            self.add_subclass_arguments(optimizer_class, nested_key, **kwargs)
        else:
            self.add_class_arguments(optimizer_class, nested_key, sub_configs=True, **kwargs)
        self._optimizers[nested_key] = (optimizer_class, link_to)

    def add_lr_scheduler_args(self, lr_scheduler_class: type | tuple[type, ...] = _LR_SCHEDULERS,
                              nested_key: str = "lr_scheduler", link_to: str = "AUTOMATIC") -> None:
        """``--lr_scheduler`` (a class, or any subclass of a tuple's classes) without ``optimizer``."""
        kwargs: dict[str, Any] = {"instantiate": False, "fail_untyped": False, "skip": {"optimizer"}}
        if isinstance(lr_scheduler_class, tuple):
            self.add_subclass_arguments(lr_scheduler_class, nested_key, **kwargs)
        else:
            self.add_class_arguments(lr_scheduler_class, nested_key, sub_configs=True, **kwargs)
        self._lr_schedulers[nested_key] = (lr_scheduler_class, link_to)


class SaveConfigCallback:
    """Writes the parsed configuration to ``<log_dir>/<config_filename>`` at the run's ``setup`` (global rank 0),
    as Lightning's callback: an existing file is an error unless ``overwrite=True``; override
    :meth:`save_config` to save it elsewhere too (``save_to_log_dir=False``: only there)."""

    identity = "cli.save-config"

    def __init__(self, parser: Any, config: Any, config_filename: str = "config.yaml", overwrite: bool = False,
                 multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser, self.config = parser, config
        self.config_filename, self.overwrite, self.multifile = config_filename, overwrite, multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError("`save_to_log_dir=False` only makes sense when subclassing SaveConfigCallback to "
                             "implement `save_config`.")

    @hookimpl(trylast=True)  # after the loggers fixed their folder
    def setup(self, trainer: Any, stage: str) -> None:
        if self.already_saved or not trainer.is_global_zero:
            return
        if self.save_to_log_dir:
            path = os.path.join(trainer.log_dir, self.config_filename)
            if not self.overwrite and os.path.isfile(path):
                raise RuntimeError(f"{type(self).__name__} expected {path} to NOT exist. Aborting to avoid "
                                   "overwriting results of a previous run. Delete it, set "
                                   "`LightningCLI(save_config_callback=None)`, or set "
                                   '`LightningCLI(save_config_kwargs={"overwrite": True})`.')
            os.makedirs(trainer.log_dir, exist_ok=True)
            self.parser.save(self.config, path, **keep_unset(self.parser, "save"), overwrite=self.overwrite,
                             multifile=self.multifile)
        self.save_config(trainer, trainer.module, stage)
        self.already_saved = True

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Override to save the configuration somewhere else as well (global rank 0 only)."""


class LightningCLI:
    """Lightning's ``LightningCLI(model_class, datamodule_class, ...)``: parses the command line, builds the
    model, the DataModule and the Trainer (``self.model``, ``self.datamodule``, ``self.trainer``) and, with
    ``run=True``, runs the subcommand. The methods a subclass overrides are Lightning's, called in its order."""

    def __init__(self, model_class: type | Callable[..., Any] | None = None,
                 datamodule_class: type | Callable[..., Any] | None = None,
                 save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
                 save_config_kwargs: dict[str, Any] | None = None, trainer_class: type = Trainer,
                 trainer_defaults: dict[str, Any] | None = None, seed_everything_default: bool | int = True,
                 parser_kwargs: dict[str, Any] | None = None, parser_class: type = LightningArgumentParser,
                 subclass_mode_model: bool = False, subclass_mode_data: bool = False,
                 args: list[str] | dict[str, Any] | Namespace | None = None, run: bool = True,
                 auto_configure_optimizers: bool = True, load_from_checkpoint_support: bool = True) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = dict(save_config_kwargs or {})
        if trainer_class is Trainer:  # Lightning's CLI: its Trainer gets Lightning's defaults (lightning_logs, ...)
            lightning_trainer()
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.model_class, self._model_class = model_class, model_class or Model
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class, self._datamodule_class = datamodule_class, datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        names = self.subcommands()
        main_kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in names}
        sub_kwargs = {k: v for k, v in self.parser_kwargs.items() if k in names}
        self.setup_parser(run, main_kwargs, sub_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # -- the parser ------------------------------------------------------------------------------------
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """A parser with ``-c/--config``."""
        kwargs.setdefault("dump_header", [f"ember=={__version__}"])
        parser: LightningArgumentParser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile,
                            help="Path to a configuration file in json or yaml format.")
        return parser

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any],
                     subparser_kwargs: dict[str, Any]) -> None:
        self.parser = self.init_parser(**main_kwargs)
        if add_subcommands:
            self._subcommand_method_arguments: dict[str, list[str]] = {}
            self._add_subcommands(self.parser, **subparser_kwargs)
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--seed_everything", type=bool | int, default=self.seed_everything_default,
                            help="Set to an int to run seed_everything with this value before classes instantiation."
                                 "Set to True to use a random seed.")

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data,
                                        required=self.datamodule_class is not None)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add arguments (``parser.add_argument``) or links (``parser.link_arguments``)."""

    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizer_groups:
                parser.add_optimizer_args((torch.optim.Optimizer,))
            if not parser.lr_scheduler_groups:
                parser.add_lr_scheduler_args(_LR_SCHEDULERS)
        self.link_optimizers_and_lr_schedulers(parser)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands and the Trainer method arguments each does not take from the command line."""
        return {"fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
                "validate": {"model", "dataloaders", "datamodule"},
                "test": {"model", "dataloaders", "datamodule"},
                "predict": {"model", "dataloaders", "datamodule"}}

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        commands = parser.add_subcommands()
        for subcommand in self.subcommands():
            doc = (getattr(self.trainer_class, subcommand).__doc__ or "").strip().split("\n")[0] or None
            sub_kwargs = dict(kwargs.get(subcommand, {}))
            sub_kwargs.setdefault("description", doc)
            sub = self.init_parser(**sub_kwargs)
            self._add_arguments(sub)
            added = sub.add_method_arguments(self.trainer_class, subcommand, skip=set(self.subcommands()[subcommand]))
            self._subcommand_method_arguments[subcommand] = added
            self._subcommand_parsers[subcommand] = sub
            commands.add_subcommand(subcommand, sub, help=doc)

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """Links the optimizer and scheduler groups added with a ``link_to`` other than ``"AUTOMATIC"``."""
        for key, (class_type, link_to) in {**parser.optimizer_groups, **parser.lr_scheduler_groups}.items():
            if link_to == "AUTOMATIC":
                continue
            if isinstance(class_type, tuple):
                parser.link_arguments(key, link_to)
            else:
                parser.link_arguments(key, link_to, compute_fn=partial(_with_class_path, class_type))

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parses ``args`` (``sys.argv`` when None; a dict or Namespace as a configuration) into ``self.config``."""
        if isinstance(args, dict | Namespace):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def _parser(self, subcommand: str | None) -> LightningArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    def _get(self, config: Any, key: str, default: Any = None) -> Any:
        return config.get(str(self.subcommand), config).get(key, default)

    def _set_seed(self) -> None:
        seed = self._get(self.config, "seed_everything")
        if seed is False or seed is None:
            return
        if seed is True:  # a seed drawn now (or the job's), saved with the config
            env = os.environ.get("PL_GLOBAL_SEED") or os.environ.get("EMBER_GLOBAL_SEED")
            seed = int(env) if env is not None else random.randrange(2**32)
        seed = seed_everything(seed, workers=True, verbose=False)
        if self.subcommand:
            self.config[self.subcommand]["seed_everything"] = seed
        else:
            self.config["seed_everything"] = seed

    # -- building and running ----------------------------------------------------------------------------
    def before_instantiate_classes(self) -> None:
        """Override to run code before the classes are built."""

    def instantiate_classes(self) -> None:
        """Builds the model, the DataModule and the Trainer from ``self.config`` (``self.config_init``)."""
        self.config_init = self.parser.instantiate(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def after_instantiate_classes(self) -> None:
        """Override to run code after the classes are built."""

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """The Trainer of ``self.config_init``'s ``trainer`` section (``kwargs`` added)."""
        callbacks = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        trainer = self._get(self.config_init, "trainer", default={})
        config = {**(trainer.as_dict() if isinstance(trainer, Namespace) else dict(trainer)), **kwargs}
        return self._instantiate_trainer(config, callbacks)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        config = trainer_kwargs(config)
        value = config.get("callbacks")
        config["callbacks"] = [] if value is None else list(value) if isinstance(value, list) else [value]
        config["callbacks"].extend(callbacks)
        if "callbacks" in self.trainer_defaults:
            value = self.trainer_defaults["callbacks"]
            config["callbacks"] += value if isinstance(value, list) else [value]
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            config["callbacks"].append(self.save_config_callback(
                self._parser(self.subcommand), self.config.get(str(self.subcommand), self.config),
                **self.save_config_kwargs))
        return self.trainer_class(**config)

    @staticmethod
    def configure_optimizers(lightning_module: Any, optimizer: torch.optim.Optimizer,
                             lr_scheduler: Any = None) -> Any:
        """What the model's ``configure_optimizers`` returns when ``--optimizer`` is given."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": lr_scheduler, "monitor": getattr(lr_scheduler, "monitor", None)}}
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        """With ``--optimizer`` given (the ``AUTOMATIC`` groups), the model's ``configure_optimizers`` becomes
        :meth:`configure_optimizers` with that optimizer (and scheduler), as in Lightning."""
        if not self.auto_configure_optimizers:
            return
        parser = self._parser(subcommand)

        def automatic(base: type | tuple[type, ...], register: dict[str, tuple[Any, str]]) -> list[str]:
            bases = base if isinstance(base, tuple) else (base,)
            return [key for key, (classes, link_to) in register.items() if link_to == "AUTOMATIC"
                    and any(issubclass(c, bases) for c in (classes if isinstance(classes, tuple) else (classes,)))]

        optimizers = automatic(torch.optim.Optimizer, parser.optimizer_groups)
        schedulers = automatic(_LR_SCHEDULERS, parser.lr_scheduler_groups)
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(f"`{type(self).__name__}.add_configure_optimizers_method_to_model` expects at most one "
                             f"optimizer and one lr_scheduler to be 'AUTOMATIC', but found {optimizers + schedulers}: "
                             "link the groups and implement `configure_optimizers` instead.")
        optimizer_class = parser.optimizer_groups[optimizers[0]][0]
        optimizer_init = self._get(self.config_init, optimizers[0])
        if not isinstance(optimizer_class, tuple):
            optimizer_init = _with_class_path(optimizer_class, optimizer_init)
        if not optimizer_init:
            return  # the groups are there but were not given
        scheduler_init = None
        if schedulers:
            scheduler_class = parser.lr_scheduler_groups[schedulers[0]][0]
            scheduler_init = self._get(self.config_init, schedulers[0])
            if not isinstance(scheduler_class, tuple):
                scheduler_init = _with_class_path(scheduler_class, scheduler_init)
        if defines(self.model, "configure_optimizers"):
            warnings.warn(f"`{type(self.model).__name__}.configure_optimizers` will be overridden by "
                          f"`{type(self).__name__}.configure_optimizers`.", stacklevel=2)
        optimizer = instantiate_class(self.model.parameters(), _as_dict(optimizer_init))
        scheduler = instantiate_class(optimizer, _as_dict(scheduler_init)) if scheduler_init else None
        fn = partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        update_wrapper(fn, self.configure_optimizers)
        self.model.configure_optimizers = MethodType(fn, self.model)

    def _run_subcommand(self, subcommand: str) -> None:
        """``before_<subcommand>``, then the subcommand (a method of this class named so, else the Trainer's),
        then ``after_<subcommand>``."""
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        fn = getattr(self, subcommand, getattr(self.trainer, subcommand))
        fn(**self._prepare_subcommand_kwargs(subcommand))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        kwargs = {k: v for k, v in self.config_init[subcommand].items()
                  if k in self._subcommand_method_arguments[subcommand]}
        kwargs["model"] = self.model
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        return kwargs


def _as_dict(init: Any) -> dict[str, Any]:
    return init.as_dict() if isinstance(init, Namespace) else dict(init)


def _with_class_path(class_type: type, init_args: Any = None) -> dict[str, Any]:
    if isinstance(init_args, Namespace):
        init_args = init_args.as_dict()
    return {"class_path": f"{class_type.__module__}.{class_type.__name__}", "init_args": init_args or {}}


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """``init["class_path"]``'s class called with ``args`` (a tuple, or one positional argument) and
    ``init["init_args"]``."""
    import importlib

    module, name = init["class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    return cls(*(args if isinstance(args, tuple) else (args,)), **init.get("init_args", {}))
