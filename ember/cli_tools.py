"""``ember tune`` (learning-rate and batch-size finders) and ``ember plot`` (a run's metrics as a PNG).

Both are thin: the work is in :mod:`ember.tuner` and :mod:`ember.plot`, whose functions take plain arguments,
so another front end can call :func:`tune` with the model, DataModule and Trainer it built.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ember.cli_registry import ArgumentParser, CLIError, command
from ember.core.errors import suggest

TUNE_HELP = "run the learning-rate finder and/or the batch-size finder (then optionally fit)"


def tune(trainer: Any, model: Any, datamodule: Any = None, lr_find: bool = True, batch_size: str | None = None,
         plot: str | None = None, num_training: int = 100, max_trials: int = 25) -> dict[str, Any]:
    """Run the finders asked for; returns ``{"lr": ..., "batch_size": ..., "plot": ...}`` for those that ran."""
    from ember.tuner import Tuner

    tuner = Tuner(trainer)
    found: dict[str, Any] = {}
    if batch_size is not None:
        found["batch_size"] = tuner.scale_batch_size(model, datamodule=datamodule, mode=batch_size,
                                                     max_trials=max_trials)
    if lr_find:
        finder = tuner.lr_find(model, datamodule=datamodule, num_training=num_training)
        found["lr"] = finder.suggestion()
        if plot:
            finder.plot(plot)
            found["plot"] = plot
    return found


def _tune_parser() -> ArgumentParser:
    p = ArgumentParser(prog="ember tune", description=TUNE_HELP + ". Every other argument is ember fit's "
                       "(--model, --data, --trainer.*, -c FILE); see `ember fit --help`.")
    p.add_argument("--lr-find", action="store_true", help="run the learning-rate range test")
    p.add_argument("--batch-size", choices=("power", "binsearch"), default=None,
                   help="find the largest batch size that fits (the model or DataModule has a batch_size)")
    p.add_argument("--num-training", type=int, default=100, help="steps of the learning-rate range test")
    p.add_argument("--max-trials", type=int, default=25, help="batch sizes tried at most")
    p.add_argument("--plot", default=None, metavar="PNG", help="save the learning-rate finder's plot here")
    p.add_argument("--fit", action="store_true", help="then train with what was found")
    return p


@command("tune", TUNE_HELP, raw=True)
def _tune(argv: list[str]) -> int:
    from ember import cli_config
    from ember.cli_explain import flags

    tune_parser = _tune_parser()
    own, rest = tune_parser.parse_known_args(argv)
    fit_options = ("--config", "--print_config", "--seed_everything", "--model", "--data", "--ckpt_path", "--trainer")
    for word in rest:
        name = word.split("=")[0]
        if name.startswith("--") and name.split(".")[0] not in fit_options:
            raise CLIError(f"unknown option {name!r}.{suggest(name, tune_parser.option_strings() + flags())} "
                           "`ember tune --help` and `ember fit --help` list them.")
    if not own.lr_find and own.batch_size is None:
        own.lr_find = True
    parser, cfg = cli_config.parse("fit", rest)
    model, data, trainer = cli_config.build(parser, cfg, "tune")
    found = tune(trainer, model, data, own.lr_find, own.batch_size, own.plot, own.num_training, own.max_trials)
    for key, value in found.items():
        print(f"{key}: {value}")
    if own.fit:
        trainer.fit(model, datamodule=data)
    return 0


def _plot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory of the CSV logger (or its metrics.csv, or a folder above them)")
    p.add_argument("-o", "--output", default=None, help="the PNG to write (default: curves.png beside metrics.csv)")


@command("plot", "draw a run's logged metrics (losses, metrics, learning rates) to a PNG", _plot_args)
def _plot(args: argparse.Namespace) -> int:
    from ember.core.errors import EmberError
    from ember.plot import plot_run

    try:
        path = plot_run(args.run, args.output)
    except (EmberError, OSError) as exc:
        print(f"ember plot: error: {exc}", file=sys.stderr)
        return 2
    if path is None:
        return 1
    print(path)
    return 0
