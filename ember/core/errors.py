"""The errors ember raises for bad input. Each message says what was wrong, where, and how to fix it."""

from __future__ import annotations

import difflib
import inspect
import os
import warnings
from collections.abc import Iterable


class EmberError(Exception):
    """Base class of ember's own errors."""


class EmberWarning(UserWarning):
    """A likely mistake that does not stop the run."""


class PossibleUserWarning(UserWarning):
    """A setting that is often a mistake but may be intended (``max_epochs`` not given, a module left in eval
    mode, ...); Lightning's category of the same name. Silence it with
    ``warnings.filterwarnings("ignore", category=PossibleUserWarning)``."""


class UntrainedWeightsWarning(EmberWarning):
    """``trainer.validate``/``test``/``predict`` evaluates a model whose weights come from no fit and no checkpoint
    (possibly untrained): no ``ckpt_path`` was given and no checkpoint of an earlier fit of the same run name was
    found. The message says how to pass one."""


class NothingToResumeWarning(EmberWarning):
    """``ckpt_path="last"`` found no last checkpoint, of this run or of an earlier run of the same name, so nothing
    is loaded (a fit starts from the beginning). Expected on the first start of a script that resumes with
    ``ckpt_path="last"``: ``warnings.filterwarnings("ignore", category=ember.NothingToResumeWarning)``."""


class ConfigurationError(EmberError, ValueError):
    """A Trainer argument, a module or a data source that cannot be used as given."""


class UnknownArgumentError(ConfigurationError, TypeError):
    """A keyword argument nothing declares (``Trainer(max_epoch=3)``): a ``TypeError``, as Python raises for an
    unexpected keyword argument, whose message names the closest valid argument."""


class NoModelError(ConfigurationError, AttributeError):
    """Something that needs the trainer's module was asked for before any run attached one
    (``trainer.save_checkpoint`` before ``fit``): an ``AttributeError`` too, as Lightning raises."""


class StepSignatureError(ConfigurationError, RuntimeError):
    """A ``*_step`` does not fit the run's dataloaders: it requires ``dataloader_idx`` with one loader, or cannot
    take it with several."""


class SchedulerStateError(ConfigurationError, TypeError):
    """A learning-rate scheduler without ``state_dict``/``load_state_dict``: checkpoints could not save it."""


class PluginError(EmberError):
    """A plugin that cannot be found, loaded, registered or selected."""


class UnknownPluginError(PluginError, LookupError):
    """A plugin name that no installed distribution provides."""


class PluginConflictError(PluginError):
    """Two distributions claim one plugin identity."""


class CheckpointError(EmberError):
    """A checkpoint that cannot be read or does not fit the run."""


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """A checkpoint path with no file there: a ``FileNotFoundError`` too, as ``torch.load`` (and Lightning) raise."""


def closest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest of ``choices`` to ``name`` (a likely typo of it), or None."""
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def suggest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """A ``" Did you mean 'x'?"`` suffix for the closest of ``choices``, or ``""``. Every did-you-mean in ember's
    messages comes from here."""
    match = closest(name, choices, cutoff)
    return f" Did you mean {match!r}?" if match is not None else ""


class AutomaticOptimizationError(ConfigurationError, RuntimeError):
    """A module that automatic optimization cannot train as written (several optimizers, a ``training_step`` that
    takes ``optimizer_idx``): a ``RuntimeError`` too, as Lightning raises one."""


class HangError(EmberError, RuntimeError):
    """A process of a multi-process job made no progress for ``Trainer(hang_timeout=...)`` seconds; the message
    names it, its last global step and the hook it was in. Raised on every process of the job."""


class WorkerFailedError(EmberError, RuntimeError):
    """A process of a multi-process job failed; raised in the process that started the job.

    ``rank`` is the global rank that failed first, ``error`` its exception as ``"Type: message"`` and
    ``remote_traceback`` its traceback as text (empty when the process died without one, e.g. killed).
    """

    def __init__(self, message: str, rank: int, error: str = "", remote_traceback: str = "",
                 exitcode: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.error = error
        self.remote_traceback = remote_traceback
        self.exitcode = exitcode


_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` pointing at the first line outside ember (the user's ``trainer.fit(...)`` call)."""
    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_back is not None and \
            os.path.abspath(frame.f_code.co_filename).startswith(_EMBER_DIR + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
