"""``callback.model-checkpoint``: save checkpoints while fitting; keep the best by a metric, and ``last.ckpt``.

Lightning's ``ModelCheckpoint`` arguments and behaviour: by default the files go to the run's folder,
``<save_dir>/<name>/version_<n>/checkpoints`` of the first logger (``<default_root_dir>/checkpoints`` without a
logger). Two differences (docs/checkpoints.md; the Lightning-named twin keeps Lightning's): ``save_last``
defaults to True, so ``ckpt_path="last"`` always finds the newest state, and ``last.ckpt`` is overwritten in place
rather than versioned (``last-v1.ckpt``). Every file is written atomically, and a file that leaves the top k is
removed only after its replacement is complete. It deletes only files it wrote (or the run it continues wrote) in
its own directory, never the file the run resumed from.

When it saves:

* ``every_n_train_steps=N``: after every N-th optimizer step (in ``on_train_batch_end``).
* ``train_time_interval=timedelta``: after the first batch that ends that long after the previous save.
* ``every_n_epochs=N`` (the default, N=1, when neither of the above is given): at the end of every N-th
  epoch: in ``on_train_epoch_end``, or in ``on_validation_end`` when validation runs more or less often than
  once per epoch (``save_on_train_epoch_end`` decides explicitly).
* ``save_last``: with every save above, and at the end of training if no save was due in the whole fit.
* ``save_on_exception=True``: also in ``on_exception`` (an error, Ctrl-C, a signal), unless the current step's
  checkpoint is on disk: one more file of the regular name (``-v1``, ... if taken), outside the ranking, never
  deleted; ``last.ckpt`` keeps the newest safe point, the state an exact resume needs.

Its hooks are ``trylast``, so it sees what the module and the other callbacks logged in the same event.
Never during sanity checking, ``fast_dev_run`` or outside ``fit``; at most once per optimizer step.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from datetime import timedelta
from typing import Any

from ember.core.checkpointing.checkpoint import default_checkpoint_dir
from ember.core.errors import ConfigurationError
from ember.core.hooks.options import boolean
from ember.hookspecs import hookimpl
from ember.plugins._shared.folders import check_writable
from ember.plugins.callbacks.checkpoint_options import (
    bookkeeping,
    check_mode,
    check_top_k,
    format_name,
    newest_file,
    not_ours,
    number,
    schedule,
    sibling_runs,
    write_best_k_yaml,
)

log = logging.getLogger("ember")


class ModelCheckpoint:
    """Save checkpoints during ``fit`` (see the module docstring; arguments as Lightning's).

    :param dirpath: the directory; default the run's folder: ``<save_dir>/<name>/version_<n>/checkpoints`` of the
        first logger, ``<default_root_dir>/checkpoints`` without a logger.
    :param filename: a template such as ``"{epoch}-{val_loss:.2f}"``; fields are ``epoch``, ``step`` and any
        logged metric. Default ``"{epoch}-{step}"``.
    :param monitor: the logged metric that ranks checkpoints; None keeps the newest.
    :param verbose: log each decision.
    :param save_last: also write ``last.ckpt`` at every save.
    :param save_top_k: how many ranked checkpoints to keep (-1: all; 0: none). Without ``monitor``, 1 keeps the
        newest and -1 keeps every one.
    :param save_weights_only: write weights and hyperparameters only (cannot resume a fit).
    :param mode: ``"min"`` or ``"max"``: whether a lower or higher ``monitor`` is better.
    :param auto_insert_metric_name: ``{epoch}`` becomes ``epoch=3`` in the file name.
    :param every_n_train_steps: save every N optimizer steps.
    :param train_time_interval: save when this much time passed (a ``timedelta`` or seconds).
    :param every_n_epochs: save every N epochs.
    :param save_on_train_epoch_end: save epoch checkpoints in ``on_train_epoch_end`` (True) or
        ``on_validation_end`` (False); None decides from the validation schedule.
    :param enable_version_counter: add ``-v1``, ``-v2``, ... instead of overwriting an existing ranked file.
    :param save_on_exception: also save when the fit fails (see the module docstring). Default False.
    """

    identity = "callback.model-checkpoint"

    @staticmethod
    @hookimpl
    def add_options(options: Any) -> None:
        options.add("enable_checkpointing", type="bool", default=True, validate=boolean("enable_checkpointing"),
                    switches="callback.model-checkpoint",
                    help="save a checkpoint at the end of every training epoch (ModelCheckpoint's defaults); a "
                         "ModelCheckpoint passed in callbacks replaces it")
    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1
    #: A ``last.ckpt`` already there, not this run's, gets ``last-v1.ckpt`` beside it (Lightning's twin); ember's
    #: own callback overwrites it in place.
    version_last = False

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 monitor: str | None = None, verbose: bool = False, save_last: bool = True, save_top_k: int = 1,
                 save_weights_only: bool = False, mode: str = "min", auto_insert_metric_name: bool = True,
                 every_n_train_steps: int | None = None, train_time_interval: timedelta | float | None = None,
                 every_n_epochs: int | None = None, save_on_train_epoch_end: bool | None = None,
                 enable_version_counter: bool = True, save_on_exception: bool = False) -> None:
        check_mode(mode)
        check_top_k(save_top_k, monitor)
        every_steps, every_epochs, train_time_interval = schedule(every_n_train_steps, every_n_epochs,
                                                                  train_time_interval)
        self.dirpath: str | None = os.path.abspath(os.path.expanduser(os.fspath(dirpath))) if dirpath else None
        self._dirpath_given = dirpath is not None
        self.filename = filename
        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self.every_n_train_steps = every_steps or 0
        self.every_n_epochs = every_epochs or 0
        self.train_time_interval = train_time_interval
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = enable_version_counter
        self.save_on_exception = bool(save_on_exception)
        self.best_k_models: dict[str, float] = {}
        self.kth_best_model_path = ""
        self.kth_value = math.inf if mode == "min" else -math.inf
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.current_score: float | None = None
        self.last_model_path = ""
        self._last_global_step_saved = 0  # no checkpoint before the first optimizer step
        self._last_path_saved = ""
        self._last_time_checked: float | None = None
        self._clock_read: float | None = None  # the latest reading of the clock, which the state is as of
        self._validation_ran = False
        self._resumed = False
        #: Files this run wrote (or the run it continues wrote, in the same directory): the only ones it deletes.
        self.owned_paths: set[str] = set()
        if not self.every_n_train_steps and self.train_time_interval is None:
            # Nothing to do per batch: leave the hook unregistered so it costs nothing per step.
            self.on_train_batch_end = None  # type: ignore[method-assign,assignment]
        #: The book-keeping before the latest save event, and the files that event asked for: a failure before
        #: the loop's next safe point drops the request, and the book-keeping must not name files never written.
        self._undo: dict[str, Any] = {}
        self._requested: list[str] = []

    def __repr__(self) -> str:
        return f"ModelCheckpoint(dirpath={self.dirpath!r}, monitor={self.monitor!r}, save_top_k={self.save_top_k})"

    @property
    def state_key(self) -> str:
        """The key of this callback's state in ``checkpoint["plugins"]``: the class and settings, as Lightning's."""
        return f"{type(self).__qualname__}{self._key_settings()!r}"

    def _key_settings(self) -> dict[str, Any]:
        return {"monitor": self.monitor, "mode": self.mode, "every_n_train_steps": self.every_n_train_steps,
                "every_n_epochs": self.every_n_epochs, "train_time_interval": self.train_time_interval}

    @property
    def former_state_keys(self) -> tuple[str, ...]:
        """Keys restored from too: the base class's (for a subclass), and the key before Lightning's form."""
        interval = self.train_time_interval.total_seconds() if self.train_time_interval else None
        return (f"ModelCheckpoint{self._key_settings()!r}",
                f"{self.identity}{{monitor={self.monitor!r}, mode={self.mode!r}, every_n_train_steps="
                f"{self.every_n_train_steps}, every_n_epochs={self.every_n_epochs}, train_time_interval={interval}}}")

    def to_yaml(self, filepath: str | os.PathLike | None = None) -> None:
        """Write ``best_k_models`` (path: score) as YAML, to ``filepath`` or ``<dirpath>/best_k_models.yaml``."""
        write_best_k_yaml(self.best_k_models, filepath or os.path.join(self.dirpath or ".", "best_k_models.yaml"))

    # -- hooks ---------------------------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any = None, stage: str | None = None) -> None:
        if stage == "fit":
            self._last_time_checked = None  # set by on_train_start, or by a resume before it
        if not self._dirpath_given:  # read on process 0 only: a logger's version may create its run there
            self.dirpath = default_checkpoint_dir(trainer) if trainer.is_global_zero else None
        if trainer.is_global_zero and self.dirpath is not None and stage == "fit":
            check_writable(self.dirpath, "the checkpoint folder", "choose a writable one with "
                           "ModelCheckpoint(dirpath=...) or Trainer(default_root_dir=...)")
        if trainer.world_size > 1:  # every process writes where process 0 does
            self.dirpath = trainer.broadcast(self.dirpath)

    def on_train_start(self, trainer: Any) -> None:
        if self._last_time_checked is None:  # a resumed run keeps the restored clock
            self._last_time_checked = self._clock_read = self._now()

    @hookimpl(trylast=True)
    def on_train_batch_end(self, trainer: Any) -> None:
        if self._skip(trainer):
            return
        n = self.every_n_train_steps
        skip_batch = n < 1 or trainer.global_step % n != 0
        skip_time = True
        if self.train_time_interval is not None:
            now = self._clock_read = self._now()
            last = self._last_time_checked
            skip_time = last is None or now - last < self.train_time_interval.total_seconds()
            if trainer.world_size > 1:  # every process decides as process 0 did
                skip_time = trainer.broadcast(skip_time)
            if not skip_time:
                self._last_time_checked = now
        if skip_batch and skip_time:
            return
        self._save_all(trainer)

    @hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: Any) -> None:
        if not self._skip(trainer) and self._on_train_epoch_end(trainer) and self._epoch_due(trainer):
            self._save_all(trainer)

    @hookimpl(trylast=True)
    def on_validation_end(self, trainer: Any) -> None:
        if trainer.sanity_checking:
            return
        self._validation_ran = True
        if not self._skip(trainer) and not self._on_train_epoch_end(trainer):
            candidates = self._candidates(trainer)
            self._begin_request()
            if self._epoch_due(trainer):
                self._save_top_k(trainer, candidates)
            self._save_last(trainer, candidates)

    @hookimpl(trylast=True)
    def on_train_end(self, trainer: Any) -> None:
        # save_last promises a last checkpoint: one now when no save was due during the whole fit
        if self.save_last and not self._last_path_saved and self._last_global_step_saved != trainer.global_step \
                and not self._not_now(trainer) and self.dirpath is not None:
            self._begin_request()
            self._save_last(trainer, self._candidates(trainer))

    def on_exception(self, trainer: Any, exception: BaseException) -> None:
        self._forget_unwritten()
        if not self.save_on_exception or self._skip_on_exception(trainer):
            return
        if trainer.world_size > 1:
            # The failure may be on this process alone: a save needs every process, and waiting for them here
            # could hang the ones that are stopping.
            log.warning("ModelCheckpoint(save_on_exception=True): no checkpoint on an exception in a run of %d "
                        "processes", trainer.world_size)
            return
        path = self._exception_path(trainer, self._candidates(trainer))
        self._save(trainer, path)
        log.info("ModelCheckpoint: %s raised (%s); saved %s", type(exception).__name__, exception, path)

    @hookimpl
    def last_checkpoint_path(self, trainer: Any) -> str | None:
        if not self.save_last or self.dirpath is None:
            return None
        if self.last_model_path and os.path.exists(self.last_model_path):
            return self.last_model_path
        if "{" not in self.CHECKPOINT_NAME_LAST:
            return self.format_checkpoint_name({}, self.CHECKPOINT_NAME_LAST)
        return self._newest_last(trainer) or self.format_checkpoint_name(self._candidates(trainer),
                                                                         self.CHECKPOINT_NAME_LAST)

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # as of the latest clock reading, so that saving does not read the clock (one reading per batch)
        since = None if self._last_time_checked is None or self._clock_read is None else \
            self._clock_read - self._last_time_checked
        return {"monitor": self.monitor, "dirpath": self.dirpath, "best_model_score": self.best_model_score,
                "best_model_path": self.best_model_path, "current_score": self.current_score,
                "best_k_models": dict(self.best_k_models), "kth_best_model_path": self.kth_best_model_path,
                "kth_value": self.kth_value, "last_model_path": self.last_model_path,
                "last_global_step_saved": self._last_global_step_saved, "seconds_since_time_check": since,
                "validation_ran": self._validation_ran}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resumed = True
        self.owned_paths = set()
        self._last_global_step_saved = state.get("last_global_step_saved", self._last_global_step_saved)
        self._validation_ran = state.get("validation_ran", False)
        since = state.get("seconds_since_time_check")
        if since is not None:
            self._last_time_checked = self._now() - since
        if state.get("dirpath") != self.dirpath:
            # A resumed fit writes into its own run folder (a new version, as in Lightning): expected, said at INFO
            # level; any other change of folder is worth a UserWarning, as in Lightning.
            old, new = state.get("dirpath"), self.dirpath
            message = (f"ModelCheckpoint: The dirpath has changed from {old!r} to {new!r}; only best_model_path is "
                       "restored, the ranking starts afresh")
            if old and new and sibling_runs(old, new):
                log.info(message)
            else:
                warnings.warn(message, UserWarning, stacklevel=2)
            self.best_model_path = state.get("best_model_path", "")
            return
        self.best_model_score = state.get("best_model_score")
        self.best_model_path = state.get("best_model_path", "")
        self.current_score = state.get("current_score")
        self.best_k_models = dict(state.get("best_k_models", {}))
        self.kth_best_model_path = state.get("kth_best_model_path", "")
        self.kth_value = state.get("kth_value", self.kth_value)
        self.last_model_path = state.get("last_model_path", "")
        # the interrupted run this one continues, in the same directory, wrote these
        self.owned_paths = {p for p in (*self.best_k_models, self.best_model_path, self.last_model_path) if p}

    @staticmethod
    def _now() -> float:
        """The clock ``train_time_interval`` is measured with."""
        return time.monotonic()

    # -- deciding --------------------------------------------------------------------------------------
    def _not_now(self, trainer: Any) -> bool:  # never during sanity checking, fast_dev_run or outside fit
        return bool(trainer.config.fast_dev_run) or trainer.state.get("fn") != "fit" or trainer.sanity_checking

    def _skip(self, trainer: Any) -> bool:
        return self._not_now(trainer) or self._last_global_step_saved == trainer.global_step

    def _skip_on_exception(self, trainer: Any) -> bool:
        """As _skip, but a step counts as saved only once its file is on disk (a failure can overtake a request)."""
        if self.dirpath is None or self._not_now(trainer):
            return True
        return self._last_global_step_saved == trainer.global_step and \
            (not self._last_path_saved or os.path.exists(self._last_path_saved))

    def _exception_path(self, trainer: Any, candidates: dict[str, Any]) -> str:
        """The regular name; never the file the run resumed from, nor (version counter on) an existing file."""
        resumed = getattr(trainer, "ckpt_path", None)
        resumed = os.path.realpath(resumed) if isinstance(resumed, (str, os.PathLike)) else None
        path, version = self.format_checkpoint_name(candidates), self.STARTING_VERSION
        while os.path.realpath(path) == resumed or (self.enable_version_counter and os.path.exists(path)):
            path = self.format_checkpoint_name(candidates, ver=version)
            version += 1
        return path

    def _epoch_due(self, trainer: Any) -> bool:
        return self.every_n_epochs >= 1 and (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _on_train_epoch_end(self, trainer: Any) -> bool:
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        cfg = trainer.config
        if cfg.check_val_every_n_epoch != 1:
            return False
        if sum(trainer.num_val_batches) == 0:
            return True
        return cfg.val_check_interval in (None, 1.0)

    def _candidates(self, trainer: Any) -> dict[str, Any]:
        candidates = dict(trainer.callback_metrics)
        candidates.setdefault("epoch", trainer.current_epoch)
        candidates.setdefault("step", trainer.global_step)
        return candidates

    def _save_all(self, trainer: Any) -> None:
        candidates = self._candidates(trainer)
        self._begin_request()
        self._save_top_k(trainer, candidates)
        self._save_last(trainer, candidates)

    def _save_top_k(self, trainer: Any, candidates: dict[str, Any]) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            path = self._unique_path(trainer, candidates, self.best_model_path if self.save_top_k == 1 else None)
            previous, self.best_model_path = self.best_model_path, path
            self._save(trainer, path)
            if self.save_top_k == 1 and previous and previous != path:
                self._remove(trainer, previous)
            return
        if self.monitor not in candidates:
            message = (f"ModelCheckpoint(monitor={self.monitor!r}) could not find {self.monitor!r} among the logged "
                       f"metrics {sorted(k for k in candidates if k not in ('epoch', 'step'))}. Log it with "
                       f"self.log({self.monitor!r}, value) in the module.")
            if self._validation_ran or not trainer.num_val_batches:
                raise ConfigurationError(message)
            log.warning("%s (validation has not run yet: no checkpoint this time)", message)
            return
        current = number(candidates[self.monitor])
        if self._in_top_k(trainer, current):
            self._update_and_save(trainer, current, candidates)
        elif self.verbose:
            log.info("epoch %d, step %d: %r (%.6g) is not in the top %d", trainer.current_epoch,
                     trainer.global_step, self.monitor, current, self.save_top_k)

    def _in_top_k(self, trainer: Any, current: float) -> bool:
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        worst = self.best_k_models[self.kth_best_model_path]
        better = current < worst if self.mode == "min" else current > worst
        if trainer.world_size > 1:  # all processes must agree, or their files would differ
            better = trainer.reduce_boolean_decision(better, all=True)
        return better

    def _update_and_save(self, trainer: Any, current: float, candidates: dict[str, Any]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        removed = None
        if len(self.best_k_models) == k and k > 0:
            removed = self.kth_best_model_path
            self.best_k_models.pop(removed)
        if math.isnan(current):  # a NaN ranks last
            current = math.inf if self.mode == "min" else -math.inf
        path = self._unique_path(trainer, candidates, removed)
        self.current_score = current
        self.best_k_models[path] = current
        if len(self.best_k_models) == k:
            worst = max if self.mode == "min" else min
            self.kth_best_model_path = worst(self.best_k_models, key=self.best_k_models.__getitem__)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        best = min if self.mode == "min" else max
        self.best_model_path = best(self.best_k_models, key=self.best_k_models.__getitem__)
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose:
            log.info("epoch %d, step %d: %r reached %.6g (best %.6g), saving %s as top %d", trainer.current_epoch,
                     trainer.global_step, self.monitor, current, self.best_model_score, path, k)
        self._save(trainer, path)
        if removed is not None and removed != path:
            self._remove(trainer, removed)

    def _save_last(self, trainer: Any, candidates: dict[str, Any]) -> None:
        if not self.save_last:
            return
        path = self._last_path(trainer, candidates)
        previous, self.last_model_path = self.last_model_path, path
        self._save(trainer, path)
        if previous and previous != path:  # a templated last name moved on
            self._remove(trainer, previous)

    def _last_path(self, trainer: Any, candidates: dict[str, Any]) -> str:
        path = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST)
        version = self.STARTING_VERSION
        while self.version_last and self.enable_version_counter and path != self.last_model_path and \
                self._exists(trainer, path):  # another run's file: kept, this run's goes beside it
            path = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST, ver=version)
            version += 1
        return path

    def _save(self, trainer: Any, path: str) -> None:
        # Book-keeping first: the state stored inside this very checkpoint must include this save.
        self._last_global_step_saved = trainer.global_step
        self._last_path_saved = path
        self.owned_paths.add(path)
        self._requested.append(path)
        trainer.save_checkpoint(path, self.save_weights_only)  # by position, as Lightning calls it

    def _begin_request(self) -> None:
        self._undo, self._requested = bookkeeping(self), []

    def _forget_unwritten(self) -> None:
        """The fit failed: if the latest save event's files were never written, undo that event's book-keeping."""
        missing = [p for p in self._requested if not os.path.exists(p)]
        if missing and self._undo:
            for key, value in self._undo.items():
                setattr(self, key, value)
            self.owned_paths.difference_update(missing)
            log.info("ModelCheckpoint: the fit failed before %s was written; the book-keeping is as before it", missing)
        self._requested, self._undo = [], {}

    def _remove(self, trainer: Any, path: str) -> None:
        """Delete ``path`` if it is this run's to delete: a file this run wrote in its own directory, and not the
        file the run resumed from. Anything else stays (it is dropped from the ranking only)."""
        reason = not_ours(self, trainer, path)
        if reason:
            log.info("ModelCheckpoint: keeping %s (%s)", path, reason)
            return
        self.owned_paths.discard(path)
        trainer.remove_checkpoint(path)

    # -- file names ------------------------------------------------------------------------------------
    def format_checkpoint_name(self, metrics: dict[str, Any], filename: str | None = None,
                               ver: int | None = None) -> str:
        """The path for ``metrics`` (``{epoch}``, ``{step}``, ``{val_loss:.2f}``, ... filled in)."""
        name = format_name(filename or self.filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}", metrics,
                       self.auto_insert_metric_name, self.CHECKPOINT_EQUALS_CHAR)
        if ver is not None:
            name = f"{name}{self.CHECKPOINT_JOIN_CHAR}v{ver}"
        name += self.FILE_EXTENSION
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _unique_path(self, trainer: Any, candidates: dict[str, Any], replaceable: str | None = None) -> str:
        path = self.format_checkpoint_name(candidates)
        if self._resumed:
            # A file already at this name was written after the checkpoint this run resumed from, by the run
            # that was interrupted: the resumed run writes the same content again, so it replaces it.
            return path
        version = self.STARTING_VERSION
        while self.enable_version_counter and path != replaceable and self._exists(trainer, path):
            path = self.format_checkpoint_name(candidates, ver=version)
            version += 1
        return path

    def _exists(self, trainer: Any, path: str) -> bool:
        """Whether a file is at ``path``, or will be: a save this run asked for may still be on its way to the disk
        (written in the background), and a second save under its name must get the next version as well."""
        exists = path in self.owned_paths or os.path.exists(path)
        return trainer.broadcast(exists) if trainer.world_size > 1 else exists

    def _newest_last(self, trainer: Any) -> str | None:
        return newest_file(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
