"""Which checkpoint file a ``ckpt_path`` means, and where a run's files go.

A run's folder is ``<save_dir>/<name>/<version>`` of the first logger (Lightning's layout); ``ModelCheckpoint``
writes into its ``checkpoints/`` by default. ``"last"`` and ``"best"`` mean this run's files, else those of the
latest run of the same name (the folder beside it whose checkpoint folder holds the newest file);
``validate``/``test``/``predict`` without a ``ckpt_path`` for a model of unknown weights use that run's best (else
last) checkpoint, or warn (:class:`~ember.core.errors.UntrainedWeightsWarning`). docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ember.core.errors import ConfigurationError, NothingToResumeWarning, UntrainedWeightsWarning, warn_user

log = logging.getLogger("ember")


def run_dir(trainer: Any) -> str | None:
    """The run's folder, ``<save_dir>/<name>/<version>`` of the first logger (``version_<n>`` for a number), where
    the loggers write and ``ModelCheckpoint`` puts ``checkpoints/`` (Lightning's layout); None without a logger
    (or when the first has no ``version``).
    Reading a logger's version may create its run (MLflow, W&B): call it on global rank 0 and broadcast."""
    logger = trainer.logger
    if logger is None:
        return None
    version = getattr(logger, "version", None)
    if version is None or version == "":  # a logger that keeps no versions (a plugin with only the logging hooks,
        return None  # the stand-in of a fast_dev_run): no run folder
    save_dir = getattr(logger, "save_dir", None) or trainer.default_root_dir
    name = getattr(logger, "name", None)
    version = version if isinstance(version, str) else f"version_{version}"
    return os.path.abspath(os.path.join(os.fspath(save_dir), "" if name is None else str(name), version))


def default_checkpoint_dir(trainer: Any) -> str:
    """``<run folder>/checkpoints``, or ``<default_root_dir>/checkpoints`` without a logger."""
    return os.path.join(run_dir(trainer) or os.path.abspath(trainer.default_root_dir), "checkpoints")


#: ``ckpt_path`` of ``validate``/``test``/``predict`` when none was given for a model whose weights come from no
#: fit and no checkpoint: the best (else last) checkpoint of the latest fit of the same run name, else the
#: module's own weights with an :class:`UntrainedWeightsWarning`.
AUTO = "<latest fit of this run name>"
#: ``ckpt_path="current"``: evaluate the module's weights as they are (no checkpoint, no warning).
CURRENT = "current"




def announce(trainer: Any, message: str) -> None:
    """Say ``message`` on global rank 0 where a person sees it: through the ``ember`` logger at INFO when that is
    shown (a handler at INFO or below), else on stderr."""
    if not trainer.is_global_zero:
        return
    if log.isEnabledFor(logging.INFO) and log.hasHandlers():
        log.info(message)
    else:
        print(f"ember: {message}", file=sys.stderr)


def _is_within(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder


def _checkpoint_files(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(folder, n) for n in names if n.endswith(".ckpt") and not n.startswith(".")]


def _user_level() -> int:
    """The ``stacklevel`` of a warning that names the caller's line outside ember (the ``trainer.test(...)`` call)."""
    ember_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = inspect.currentframe(), 0  # this function's frame; level 1 is the caller of warnings.warn
    while frame is not None and frame.f_back is not None and \
            os.path.abspath(frame.f_code.co_filename).startswith(ember_dir + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def _is_last(path: str) -> bool:
    return os.path.basename(path).startswith("last")


def checkpoint_dirs(trainer: Any) -> list[str]:
    """Where the checkpoint callbacks of the trainer write (their ``dirpath``, once set up)."""
    dirs = [getattr(cb, "dirpath", None) for cb in trainer.checkpoint_callbacks]
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs if d))


class CheckpointPaths:
    """Resolves a ``ckpt_path`` for ``trainer``; ``last_paths`` answers this run's own "last" files."""

    #: A fit given no ``ckpt_path``: it resumes from ``"last"`` when a failed fit left a checkpoint (a file that
    #: ``exception_checkpoint_path`` answers exists: ``OnExceptionCheckpoint`` removes its file after a fit that ends
    #: normally), else it starts from the module's weights.
    AFTER_FAILURE = "<the checkpoint a failed fit left, if any>"

    def __init__(self, trainer: Any, last_paths: Callable[[], list[str]]) -> None:
        self.trainer = trainer
        self.last_paths = last_paths

    def resolve(self, ckpt_path: Any) -> str | None:
        """``"last"``, ``"best"``, :data:`AUTO`, ``"current"`` or a path, as a file to read (None: none to read)."""
        if ckpt_path == CURRENT:
            return None
        if ckpt_path == self.AFTER_FAILURE:
            return self._after_failure()
        if ckpt_path == "last":
            existing = [p for p in self.last_paths() if os.path.exists(p)]
            if existing:  # this run's own folder (a fit continued by the same Trainer, or a fixed version)
                return max(existing, key=os.path.getmtime)
            path = self._agreed(lambda: self.latest_run("last"))
            if path is None:
                path = self._agreed(self._newest_exception_checkpoint)
                if path is not None:
                    announce(self.trainer, "ckpt_path='last': no last checkpoint was kept; the one written when a fit "
                                           f"failed is read instead, {path} (a fit resumed from it starts the epoch "
                                           "it failed in again)")
                    return path
            if path is None and self.trainer.is_global_zero:
                where = " or ".join(self.last_paths()) or self._where()
                then = "the fit starts from the beginning" if self.trainer.state.fn == "fit" else \
                    "the model is evaluated with its current weights"
                warn_user(f"ckpt_path='last': there is no last checkpoint at {where} yet, nor in an earlier run of "
                          f"this run name. No checkpoint will be loaded: {then}. ModelCheckpoint(save_last=True) "
                          "keeps a last checkpoint.", NothingToResumeWarning)
            return path
        if ckpt_path == "best":
            return self._best()
        if ckpt_path == AUTO:
            return self._auto()
        if not isinstance(ckpt_path, (str, os.PathLike)):
            raise ConfigurationError(f"ckpt_path={ckpt_path!r} is invalid: pass a file path, 'last', 'best' or "
                                     "'current'.")
        return os.fspath(ckpt_path)

    def _after_failure(self) -> str | None:
        if self.trainer.hook.exception_checkpoint_path is None:  # no plugin writes one: no lookup, no broadcast
            return None
        failed = self._agreed(self._newest_exception_checkpoint)
        if failed is None:
            return None
        if self.trainer.is_global_zero:
            warn_user(f"trainer.fit() got no ckpt_path, and an earlier fit failed and left {failed}: this fit resumes "
                      "from ckpt_path='last' (a last checkpoint where one was kept, else that file). The last model "
                      "of the previous `fit` call will be used. Pass ckpt_path='last' to keep this choice and silence "
                      "this warning, or ckpt_path='current' to train from the module's own weights.")
        return self.resolve("last")

    def _newest_exception_checkpoint(self) -> str | None:
        """The newest existing file of those plugins write when a fit fails (``exception_checkpoint_path``)."""
        t = self.trainer
        existing = [os.fspath(p) for p in t.hook.call("exception_checkpoint_path", trainer=t) if p and os.path.isfile(p)]
        return max(existing, key=os.path.getmtime) if existing else None

    def _best(self) -> str:
        t = self.trainer
        cb = t.checkpoint_callback
        if t.config.fast_dev_run:
            raise ConfigurationError(f"ckpt_path='best' has no checkpoint to name in trainer.{t.state.fn}() "
                                     "with `fast_dev_run=True`. Such a fit writes no checkpoints: pass an exact "
                                     "checkpoint path (ckpt_path=PATH), or ckpt_path='current' for the model as it is.")
        if cb is None:
            raise ConfigurationError("ckpt_path='best' needs a checkpoint callback: `ModelCheckpoint` is not "
                                     "configured (enable_checkpointing=False?). Pass the checkpoint's path instead.")
        if getattr(cb, "save_top_k", None) == 0:
            raise ConfigurationError("ckpt_path='best': the `ModelCheckpoint` is not configured to save the best "
                                     "model (save_top_k=0). Pass the checkpoint's path, or 'last'.")
        best = getattr(cb, "best_model_path", "")
        if len(t.checkpoint_callbacks) > 1 and t.is_global_zero:
            warn_user(f"ckpt_path='best' with {len(t.checkpoint_callbacks)} checkpoint callbacks: trainer.{t.state.fn}() "
                      f"uses the best checkpoint path from first checkpoint callback ({best or 'none yet'}); pass "
                      "another callback's best_model_path as ckpt_path to use its best instead.")
        if best:
            return best
        path = self._agreed(lambda: self.latest_run("best"))
        if path is None:
            raise ConfigurationError(f"ckpt_path='best': no best checkpoint yet, neither from this Trainer nor from an "
                                     f"earlier fit of this run name (looked in {self._where()}). Fit first, or pass "
                                     "a checkpoint's path.")
        return path

    def _auto(self) -> str | None:
        """No ``ckpt_path`` for a model with weights of unknown origin: the latest fit's best (else last)
        checkpoint, said aloud; else the module's own weights, with a warning."""
        t = self.trainer
        fn = t.state.fn
        found = self._agreed(self._best_or_last)
        name = getattr(t.logger, "name", None)
        run = f"run name {name!r}" if isinstance(name, str) and name else "this run name"
        if found is not None:
            path, which = found
            announce(t, f"trainer.{fn}() evaluates {path}, the {which} checkpoint of the latest fit of {run} (no "
                        f"ckpt_path was given); pass ckpt_path=PATH for another file, or ckpt_path='current' for the "
                        "model's weights as they are.")
            return path
        if t.is_global_zero:
            warnings.warn(f"trainer.{fn}() evaluates the model's current weights, which come from no fit and no "
                          f"checkpoint and may be untrained: no ckpt_path was given and no checkpoint of an earlier fit "
                          f"of {run} was found (looked in {self._where()}). Pass ckpt_path='path/to/file.ckpt' "
                          f"(or 'best'/'last' after a fit; --ckpt_path on the command line), or ckpt_path='current' "
                          "to evaluate these weights on purpose.", UntrainedWeightsWarning, stacklevel=_user_level())
        return None

    def _best_or_last(self) -> tuple[str, str] | None:
        """(the file, "best" or "last") of the latest run of this run name, or None."""
        for which in ("best", "last"):
            path = self.latest_run(which)
            if path is not None:
                return path, which
        return None

    def _agreed(self, find: Callable[[], Any]) -> Any:
        """``find()`` on global rank 0, the same answer on every rank."""
        t = self.trainer
        if t.world_size > 1:
            return t.broadcast(find() if t.is_global_zero else None)
        return find()

    def _lookup_dirs(self) -> list[str]:
        """Where earlier checkpoints are looked for: the checkpoint callbacks' folders, else the default one."""
        return checkpoint_dirs(self.trainer) or [default_checkpoint_dir(self.trainer)]

    def _where(self) -> str:
        """The folders :meth:`latest_run` looks in, for messages."""
        here = run_dir(self.trainer)
        dirs = [os.path.join(os.path.dirname(here), "*", os.path.relpath(d, here))
                if here is not None and _is_within(d, here) else d for d in self._lookup_dirs()]
        return " and ".join(dirs)

    def latest_run(self, which: str) -> str | None:
        """The ``which`` ("last" or "best") checkpoint of the latest run of this run name: among the run folders
        beside this run's (``<save_dir>/<name>/*``, this one included), the one whose checkpoint folder holds the
        newest file. A checkpoint callback writing outside the run folder is looked up in its own folder."""
        here = run_dir(self.trainer)
        folders: list[str] = []
        for d in self._lookup_dirs():
            if here is not None and _is_within(d, here):
                rel = os.path.relpath(d, here)
                parent = os.path.dirname(here)
                with contextlib.suppress(FileNotFoundError):
                    folders += [os.path.normpath(os.path.join(parent, e.name, rel)) for e in os.scandir(parent)
                                if e.is_dir()]
            else:
                folders.append(d)
        runs = [(max(os.path.getmtime(f) for f in files), folder, files)
                for folder in dict.fromkeys(folders) if (files := _checkpoint_files(folder))]
        if not runs:
            return None
        _, folder, files = max(runs)
        newest = max(files, key=os.path.getmtime)
        if which == "last":
            lasts = [f for f in files if _is_last(f)]
            return max(lasts, key=os.path.getmtime) if lasts else None
        return self._recorded_best(folder, newest)

    def _recorded_best(self, folder: str, newest: str) -> str | None:
        """The best checkpoint the callback recorded in ``newest`` (its latest state), as a file in ``folder``."""
        if not os.path.isfile(newest):  # a sharded checkpoint (a folder): no recorded best is looked up
            return None
        try:  # on process 0 alone: a plain, memory-mapped read of the small entries, never a collective one
            checkpoint = torch.load(newest, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # an unreadable file is reported when it is loaded, not here
            log.warning("could not read %s to find the best checkpoint of its run: %s", newest, exc)
            return None
        states = checkpoint.get("plugins", {}) if isinstance(checkpoint, Mapping) else {}
        for state in states.values() if isinstance(states, Mapping) else ():
            best = state.get("best_model_path") if isinstance(state, Mapping) else None
            if not best:
                continue
            # the recorded file, or the file of that name in this folder (the folder may have moved); a callback
            # that wrote elsewhere names no file here
            here = os.path.join(folder, os.path.basename(str(best)))
            if os.path.abspath(os.path.dirname(str(best))) == os.path.abspath(folder) and os.path.isfile(str(best)):
                return str(best)
            if os.path.isfile(here):
                return here
        return None
