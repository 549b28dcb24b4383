"""The ``ember`` command. Each sub-command registers itself in ``COMMANDS`` (:mod:`ember.cli_registry`); the
modules of the sub-commands depend on the registry, never on this module, so the CLI imports one way.

Errors a person can act on (a :class:`~ember.cli_registry.CLIError`: a wrong option, key or class; or any
:class:`ember.EmberError`) are printed on one line, ``ember <command>: error: ...``, without a traceback;
``--debug`` (anywhere before a script's own arguments) or ``EMBER_DEBUG=1`` shows it. Other exceptions, such as
a bug in a training step, keep their traceback: it is the useful part.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ember import (
    cli_config,  # noqa: F401  (fit, validate, test, predict)
    cli_plugins,  # noqa: F401  (plugins, hooks)
    cli_tools,  # noqa: F401  (tune, plot)
)
from ember.cli_registry import COMMANDS, ArgumentParser, CLIError, command

__all__ = ["COMMANDS", "CLIError", "command", "main"]

DEBUG_ENV = "EMBER_DEBUG"
#: Exit status when the reader of the output went away (``ember plugins | head -1``): 128 + SIGPIPE.
BROKEN_PIPE = 141


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


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help="processes to start on this node")
    p.add_argument("--nnodes", type=int, default=1, metavar="N", help="nodes in the job (each runs this command)")
    p.add_argument("--node-rank", type=int, default=None, metavar="R", help="this node's rank (static rendezvous)")
    p.add_argument("--main-address", "--master-addr", default="127.0.0.1", metavar="HOST",
                   help="host of node 0 (static rendezvous)")
    p.add_argument("--main-port", "--master-port", type=int, default=None, metavar="PORT",
                   help="port node 0 listens on (static rendezvous; on a single node the launcher picks one)")
    p.add_argument("--rdzv-backend", choices=("static", "c10d"), default="static",
                   help="static: fixed node ranks; c10d: nodes meet at --rdzv-endpoint and are numbered there")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="where nodes meet (c10d)")
    p.add_argument("--run-id", default=None, help="job id shared by the nodes (c10d)")
    p.add_argument("--kill-timeout", type=float, default=None, metavar="SECONDS",
                   help="after one process fails, how long the others get between SIGTERM and SIGKILL")
    p.add_argument("--max-restarts", type=int, default=0, metavar="N",
                   help="when a process dies, stop the others and start the group again, up to N times; the fit "
                        "resumes from the run's newest checkpoint by itself")
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module (python -m)")
    p.add_argument("target", metavar="script.py", help="the training script (or module, with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


@command("run", "start a script in several processes (like torchrun); each finds its rank and world by itself",
         _run_args)
def _run(args: argparse.Namespace) -> int:
    from ember.core.errors import ConfigurationError, WorkerFailedError
    from ember.launcher import KILL_TIMEOUT, run_processes

    argv = ["-m", args.target, *args.args] if args.module else [args.target, *args.args]
    try:
        return run_processes(argv, args.nproc_per_node, nnodes=args.nnodes, node_rank=args.node_rank,
                             main_address=args.main_address, main_port=args.main_port,
                             rdzv_backend=args.rdzv_backend, rdzv_endpoint=args.rdzv_endpoint, run_id=args.run_id,
                             max_restarts=args.max_restarts, kill_timeout=KILL_TIMEOUT if args.kill_timeout is None else args.kill_timeout)
    except (WorkerFailedError, ConfigurationError) as exc:
        print(f"ember run: {exc}", file=sys.stderr)
        return 1


def _consolidate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="a sharded checkpoint directory (strategy='fsdp')")
    p.add_argument("output", help="the single checkpoint file to write")


@command("consolidate", "turn a sharded checkpoint directory into one checkpoint file", _consolidate_args)
def _consolidate(args: argparse.Namespace) -> int:
    from ember.core.errors import CheckpointError
    from ember.plugins.strategies.sharded_checkpoint import consolidate

    try:
        print(consolidate(args.checkpoint, args.output))
    except CheckpointError as exc:
        print(f"ember consolidate: {exc}", file=sys.stderr)
        return 1
    return 0


def overview() -> str:
    """``ember --help``: every command with its help line."""
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: ember [--debug] COMMAND [ARGS]", "", "PyTorch training whose every step is a hook.", "",
             "commands:"]
    lines += [f"  {name.ljust(width)}  {c.help}" for name, c in COMMANDS.items()]
    lines += ["", "`ember COMMAND --help` lists a command's arguments. --debug (or EMBER_DEBUG=1): show the "
              "traceback of an error.", ""]
    return "\n".join(lines)


def _debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """Take ``--debug`` out of ``argv``: before the command, or anywhere except among the script arguments of
    ``ember run``."""
    debug = os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false", "no")
    head = 0
    while head < len(argv) and argv[head] == "--debug":
        head += 1
    rest = argv[head:]
    if rest and rest[0] != "run":
        kept = [word for word in rest if word != "--debug"]
        head += len(rest) - len(kept)
        rest = kept
    return rest, debug or head > 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ember`` with ``argv`` (default: the process's arguments); returns the exit status."""
    from ember.core.errors import EmberError
    from ember.core.loop.signals import SignalExit, exit_status

    words, debug = _debug_flag(list(sys.argv[1:] if argv is None else argv))
    name = words[0] if words and not words[0].startswith("-") else ""
    try:
        status = _main(words)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except SystemExit as exc:  # --help, --print_config
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else _say(name, exc.code, 1))
    except (KeyboardInterrupt, SignalExit) as exc:  # Ctrl-C: 130; SIGTERM: 143; with where the checkpoint is
        return exit_status(exc)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to write, nor at exit
        return BROKEN_PIPE
    except EmberError as exc:
        if debug:
            raise
        return _say(name, exc, 2 if isinstance(exc, CLIError) else 1)


def _say(name: str, error: object, status: int) -> int:
    prefix = f"ember {name}" if name in COMMANDS else "ember"
    print(f"{prefix}: error: {error}", file=sys.stderr)
    return status


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(overview(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        from ember.core.errors import suggest

        what = "option" if name.startswith("-") else "command"
        raise CLIError(f"unknown {what} {name!r}.{suggest(name, COMMANDS)} Commands: {', '.join(COMMANDS)}.")
    sub = COMMANDS[name]
    if sub.raw:
        return int(sub.run(argv[1:]) or 0)
    parser = ArgumentParser(prog=f"ember {name}", description=sub.help)
    sub.add_arguments(parser)
    return int(sub.run(parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
