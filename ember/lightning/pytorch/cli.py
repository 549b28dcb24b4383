"""``LightningCLI`` on ember's jsonargparse CLI (:mod:`ember.cli_config`): a ``main.py`` holding
``LightningCLI(MyModel, MyDataModule)`` gives ``python main.py fit|validate|test|predict`` with ``--config``,
``--print_config``, ``--model.*``, ``--data.*`` and ``--trainer.*`` (every ember Trainer argument), and writes the
run's configuration to ``config.yaml`` in its log folder; ``run=False`` parses without subcommands and leaves the
call to you (``cli.trainer.fit(cli.model, datamodule=cli.datamodule)``). See docs/cli.md.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from ember.cli_config import DataModule, Model, SaveConfig, option_type, trainer_kwargs
from ember.core.api.trainer import Trainer
from ember.core.hooks.options import declared_options
from ember.core.loop.seed import seed_everything

__all__ = ["LightningArgumentParser", "LightningCLI", "SaveConfigCallback"]

_STAGES = ("fit", "validate", "test", "predict")


def LightningArgumentParser(**kwargs: Any) -> Any:  # noqa: N802  (Lightning's name for its parser class)
    """jsonargparse's ``ArgumentParser`` (Lightning's subclass adds nothing ember uses)."""
    from jsonargparse import ArgumentParser

    return ArgumentParser(**kwargs)


class SaveConfigCallback:
    """Writes the parsed configuration to ``<log_dir>/config.yaml`` when ``fit`` starts (pass
    ``save_config_callback=None`` to LightningCLI to write none). ``overwrite`` and ``multifile`` are accepted
    for Lightning's sake; ember overwrites the file of its own run folder."""

    def __init__(self, parser: Any = None, config: Any = None, config_filename: str = "config.yaml",
                 overwrite: bool = False, multifile: bool = False) -> None:
        self.config_filename = config_filename


class LightningCLI:
    """Lightning's ``LightningCLI(model_class, datamodule_class, ...)``: parses the command line, builds the
    model, the DataModule and the Trainer (``self.model``, ``self.datamodule``, ``self.trainer``) and, with
    ``run=True``, runs the subcommand."""

    def __init__(self, model_class: type | Callable[..., Any] | None = None,
                 datamodule_class: type | Callable[..., Any] | None = None,
                 save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
                 save_config_kwargs: dict[str, Any] | None = None, trainer_class: type = Trainer,
                 trainer_defaults: dict[str, Any] | None = None, seed_everything_default: bool | int = True,
                 parser_kwargs: dict[str, Any] | None = None, subclass_mode_model: bool = False,
                 subclass_mode_data: bool = False, args: list[str] | dict[str, Any] | None = None, run: bool = True,
                 auto_configure_optimizers: bool = True) -> None:
        self.model_class, self.datamodule_class = model_class, datamodule_class
        self.subclass_mode_model = subclass_mode_model or model_class is None
        self.subclass_mode_data = subclass_mode_data or datamodule_class is None
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = dict(save_config_kwargs or {})
        self.parser_kwargs = dict(parser_kwargs or {})
        self.subcommand: str | None = None
        self._parsers: dict[str, Any] = {}
        self.parser = self._subcommands_parser() if run else self._parser("fit")
        if isinstance(args, dict):
            self.config = self.parser.parse_object(args)
        else:
            self.config = self.parser.parse_args(args)
        self.subcommand = self.config.get("subcommand") if run else None
        section = self.config[self.subcommand] if self.subcommand else self.config
        self._build(section)
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand, section)

    # -- the parser ------------------------------------------------------------------------------------
    def _parser(self, stage: str) -> Any:
        from jsonargparse import ActionConfigFile, ArgumentParser

        kwargs = self.parser_kwargs.get(stage, {k: v for k, v in self.parser_kwargs.items() if k not in _STAGES})
        p = ArgumentParser(**kwargs)
        p.add_argument("-c", "--config", action=ActionConfigFile, help="a YAML config file; repeat to merge several")
        p.add_argument("--seed_everything", type=bool | int, default=self.seed_everything_default,
                       help="seed python, numpy and torch: an int, true (a random seed, saved) or false")
        group = p.add_argument_group("Trainer arguments")
        for option in declared_options():
            default = self.trainer_defaults.get(option.name, option.default)
            group.add_argument(f"--trainer.{option.name}", type=option_type(option),
                               default=list(default) if isinstance(default, tuple) else default,
                               help=option.help or option.name)
        self._add_class(p, "model", self.model_class or Model, self.subclass_mode_model, required=True)
        if self.datamodule_class is not None or self.subclass_mode_data:
            self._add_class(p, "data", self.datamodule_class or DataModule, self.subclass_mode_data, required=False)
        p.add_argument("--ckpt_path", type=str | None, default=None, help="a checkpoint to resume from or to load")
        self._parsers[stage] = p
        return p

    @staticmethod
    def _add_class(p: Any, key: str, cls: Any, subclass_mode: bool, required: bool) -> None:
        if subclass_mode:
            p.add_subclass_arguments(cls, key, required=required and cls is not Model)
        else:
            p.add_class_arguments(cls, key)

    def _subcommands_parser(self) -> Any:
        from jsonargparse import ArgumentParser

        top = ArgumentParser(**{k: v for k, v in self.parser_kwargs.items() if k not in _STAGES})
        commands = top.add_subcommands(required=True, dest="subcommand")
        for stage in _STAGES:
            commands.add_subcommand(stage, self._parser(stage))
        return top

    # -- building and running ----------------------------------------------------------------------------
    def _build(self, section: Any) -> None:
        seed = section.get("seed_everything")
        if seed is True:
            env = os.environ.get("EMBER_GLOBAL_SEED") or os.environ.get("PL_GLOBAL_SEED")
            section.seed_everything = seed = int(env) if env is not None else random.randrange(2**32)
        if seed is not False and seed is not None:
            seed_everything(seed)
        parser = self._parsers[self.subcommand or "fit"]
        built = parser.instantiate(section)
        self.model = built.model
        self.datamodule = built.get("data")
        kwargs = {**self.trainer_defaults, **trainer_kwargs(section.trainer.as_dict())}
        if self.save_config_callback is not None and self.subcommand in ("fit", None):
            text = parser.dump(section, skip_unset=False)
            plugins = kwargs.get("plugins") or []
            kwargs["plugins"] = [*(plugins if isinstance(plugins, list) else [plugins]), SaveConfig(text)]
        self.trainer = self.trainer_class(**kwargs)

    def _run_subcommand(self, subcommand: str, section: Any) -> None:
        method = getattr(self.trainer, subcommand)
        method(self.model, datamodule=self.datamodule, ckpt_path=section.get("ckpt_path"))
