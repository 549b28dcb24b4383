"""The ``ember`` command. Each sub-command registers itself in ``COMMANDS``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

#: name -> (help, add_arguments(parser), run(args) -> exit code)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


#: Commands that parse their own arguments: ``run(args)`` gets ``args.argv``, the words after the command.
RAW_COMMANDS: set[str] = set()


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None,
            raw: bool = False):
    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, add_arguments, run)
        if raw:
            RAW_COMMANDS.add(name)
        return run

    return register


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-epochs", type=int, default=30)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-root-dir", default="ember_logs")
    p.add_argument("--no-plot", action="store_true", help="skip the picture of the training curves")


@command("demo", "train an MLP on scikit-learn's bundled digits data and print its validation accuracy", _demo_args)
def _demo(args: argparse.Namespace) -> int:
    from ember.demo import run_demo

    accuracy = run_demo(max_epochs=args.max_epochs, precision=args.precision, accelerator=args.accelerator,
                        seed=args.seed, default_root_dir=args.default_root_dir, plot=not args.no_plot)
    print(f"validation accuracy: {accuracy:.4f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="PyTorch training whose every step is a hook.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RAW_COMMANDS:
        return int(COMMANDS[argv[0]][2](argparse.Namespace(argv=argv[1:])) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


# Sub-commands that live in their own modules register themselves on import.
from ember import (  # noqa: E402,F401
    cli_config,  # fit, validate, test, predict
    cli_plugins,  # plugins, hooks
)

if __name__ == "__main__":  # run as ember.cli, so that commands registered from other modules are seen
    from ember.cli import main as _main

    sys.exit(_main())
