"""Stopping a fit on a signal: write a checkpoint at the next safe point, then exit.

While ``trainer.fit`` trains with checkpointing enabled, SIGTERM and SIGINT do not kill the process at once:
the handler only records the request, and the loop, at its next safe point (after the current training
batch, or between epochs), writes a checkpoint to the paths the ``last_checkpoint_path`` hook answers
(``last.ckpt`` of each checkpoint callback), calls the ``requeue`` hook (answered by a cluster environment that
can requeue the job), and raises :class:`SignalExit`. Uncaught, that ends the process with exit code
``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), the code a shell reports for a process ended by
that signal, so job schedulers see an interrupted run, not a finished one. A second SIGINT raises
``KeyboardInterrupt`` at once.

Anything else that wants the same orderly stop (a cluster environment handling SLURM's SIGUSR1, a watchdog
thread) calls :func:`request_stop`; it is safe to call from a signal handler or another thread.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.core.trainer import Trainer

log = logging.getLogger("ember")

#: The signals a fit handles while checkpointing is enabled.
HANDLED = (signal.SIGTERM, signal.SIGINT)


def exit_code(signum: int) -> int:
    """The exit status a fit stopped by ``signum`` ends with: ``128 + signum``."""
    return 128 + int(signum)


class SignalExit(SystemExit):
    """Raised by ``trainer.fit`` after it saved a checkpoint on a signal. ``code`` is the exit status;
    ``signum`` the signal; ``checkpoint_path`` where the checkpoint was written."""

    def __init__(self, signum: int, checkpoint_path: str | None) -> None:
        super().__init__(exit_code(signum))
        self.signum = signum
        self.checkpoint_path = checkpoint_path


def request_stop(trainer: Trainer, signum: int = signal.SIGTERM, requeue: bool = False) -> None:
    """Ask the running fit to write a checkpoint at its next safe point and stop with ``SignalExit``.

    :param trainer: the running trainer.
    :param signum: the signal the request stands for (sets the exit status, ``128 + signum``).
    :param requeue: passed on to the ``requeue`` hook, which may then resubmit the job.
    """
    trainer.checkpointing.request_stop(signum, requeue)


class SignalHandlers:
    """Installs the fit's handlers and puts the previous ones back (main thread only)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("fit runs outside the main thread: SIGTERM/SIGINT keep their handlers")
            return
        for signum in HANDLED:
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except (ValueError, OSError):  # pragma: no cover - e.g. an embedded interpreter
                continue

    def uninstall(self) -> None:
        for signum, handler in self.previous.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, OSError, TypeError):  # pragma: no cover
                pass
        self.previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        ckpt = self.trainer.checkpointing
        if ckpt.stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        log.warning("received %s: writing a checkpoint after the current batch, then exiting with code %d",
                    signal.Signals(signum).name, exit_code(signum))
        ckpt.request_stop(signum, False)
