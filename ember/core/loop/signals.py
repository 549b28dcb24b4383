"""Stopping a fit on a signal: at the next safe point, with a checkpoint where checkpointing is on.

While ``trainer.fit`` trains (on the main thread), SIGINT (Ctrl-C) and SIGTERM do not stop the process at
once: the handler only records the request, and the loop, at its next safe point (after the current training
batch, or between epochs), writes a checkpoint to the paths the ``last_checkpoint_path`` hook answers
(``last.ckpt`` of each checkpoint callback) when checkpointing is enabled, calls the ``requeue`` hook (answered
by a cluster environment that can requeue the job), runs every ``on_exception`` hook and raises:

* for SIGINT, ``KeyboardInterrupt`` (with ``checkpoint_path`` and ``signum`` attributes): a script stops as on any Ctrl-C, a notebook cell
  ends as interrupted with the module's trained weights still in memory; ``ember fit`` exits with status 130
  and prints where the checkpoint is;
* for SIGTERM (and anything else), :class:`SignalExit`, a ``SystemExit`` with status ``128 + signal number``
  (143 for SIGTERM), the status a shell reports for a process ended by that signal, so job schedulers (and the
  launcher of a multi-process job) see an interrupted run, not a finished one.

A second SIGINT raises ``KeyboardInterrupt`` at once, a second SIGTERM :class:`SignalExit` at once, without a
checkpoint. A multi-process fit agrees on stopping every few batches, so all processes stop at the same batch.

Anything else that wants the same orderly stop (a cluster environment handling SLURM's SIGUSR1, a watchdog
thread) calls :func:`request_stop`; it is safe to call from a signal handler or another thread.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.core.loop.parts import RunningTrainer

log = logging.getLogger("ember")

#: The signals a fit handles while checkpointing is enabled.
HANDLED = (signal.SIGTERM, signal.SIGINT)


def exit_code(signum: int) -> int:
    """The exit status a fit stopped by ``signum`` ends with: ``128 + signum``."""
    return 128 + int(signum)


class SignalExit(SystemExit):
    """Raised by ``trainer.fit`` at the safe point after a signal other than SIGINT (SIGTERM, ...). ``code`` is the
    exit status; ``signum`` the signal; ``checkpoint_path`` where the checkpoint was written (None: none was)."""

    def __init__(self, signum: int = signal.SIGTERM, checkpoint_path: str | None = None) -> None:
        super().__init__(exit_code(signum))
        self.signum = signum
        self.checkpoint_path = checkpoint_path


def stop_exception(signum: int, checkpoint_path: str | None) -> BaseException:
    """What a fit stopped by ``signum`` raises: for SIGINT a ``KeyboardInterrupt`` (exactly that class, so that
    an uncaught one ends a script as Ctrl-C does, status 130), else :class:`SignalExit`. Either carries
    ``checkpoint_path`` (None with checkpointing off) and ``signum``."""
    if signum != signal.SIGINT:
        return SignalExit(signum, checkpoint_path)
    where = f"checkpoint saved at {checkpoint_path}" if checkpoint_path else "no checkpoint (checkpointing is off)"
    exc = KeyboardInterrupt(f"training interrupted (Ctrl-C) at a safe point; {where}")
    exc.checkpoint_path = checkpoint_path  # type: ignore[attr-defined]
    exc.signum = int(signal.SIGINT)  # type: ignore[attr-defined]
    return exc


def exit_status(exc: BaseException, program: str = "ember") -> int:
    """For a command: print how the run stopped (and where its checkpoint is) and return the exit status,
    130 for Ctrl-C, ``128 + signal`` for :class:`SignalExit`."""
    import sys

    path = getattr(exc, "checkpoint_path", None)
    how = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else \
        f"stopped by {signal.Signals(getattr(exc, 'signum', signal.SIGTERM)).name}"
    where = f"; the checkpoint is {path} (resume with --ckpt_path {path})" if path else ""
    print(f"{program}: {how}{where}", file=sys.stderr)
    return exit_code(signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else int(exc.code or 1) \
        if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1


def request_stop(trainer: RunningTrainer, signum: int = signal.SIGTERM, requeue: bool = False) -> None:
    """Ask the running fit to write a checkpoint at its next safe point and stop with ``SignalExit``.

    :param trainer: the running trainer.
    :param signum: the signal the request stands for (sets the exit status, ``128 + signum``).
    :param requeue: passed on to the ``requeue`` hook, which may then resubmit the job.
    """
    trainer.checkpointing.request_stop(signum, requeue)


class SignalHandlers:
    """Installs the fit's handlers and puts the previous ones back (main thread only)."""

    def __init__(self, trainer: RunningTrainer) -> None:
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
        if ckpt.stop_signal is not None:  # the second signal: stop now, without a checkpoint
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SignalExit(signum, None)
        saving = "writing a checkpoint" if self.trainer.config.enable_checkpointing else "stopping"
        log.warning("received %s: %s after the current batch (send it again to stop at once)",
                    signal.Signals(signum).name, saving)
        ckpt.request_stop(signum, False)
