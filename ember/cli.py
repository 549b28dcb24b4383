"""The ``ember`` command. Each sub-command registers itself in ``COMMANDS``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

#: name -> (help, add_arguments(parser), run(args) -> exit code)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None):
    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, add_arguments, run)
        return run

    return register


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-epochs", type=int, default=30)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-root-dir", default="ember_logs/demo")


@command("demo", "train an MLP on scikit-learn's bundled digits data and print its validation accuracy", _demo_args)
def _demo(args: argparse.Namespace) -> int:
    from ember.demo import run_demo

    accuracy = run_demo(max_epochs=args.max_epochs, precision=args.precision, accelerator=args.accelerator,
                        seed=args.seed, default_root_dir=args.default_root_dir)
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


# Sub-commands that live in their own modules register themselves on import.
from ember import cli_plugins  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
