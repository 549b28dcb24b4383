"""``lightning.pytorch.callbacks.model_checkpoint``: ``ModelCheckpoint`` with Lightning's defaults.

It is ember's callback (:mod:`ember.plugins.callbacks.model_checkpoint`) with the arguments in Lightning's order
and two of Lightning's choices: ``save_last`` defaults to None (no ``last.ckpt`` unless asked for), and a
``last.ckpt`` that another run left in the folder is kept, this run's going to ``last-v1.ckpt``. Every ember
``ModelCheckpoint`` (the Trainer's default one included) counts as an instance of it.

``save_last="link"`` makes ``last.ckpt`` a relative symbolic link to the newest file saved (a copy where links
cannot be made), as in Lightning. The methods Lightning's subclasses override or call are the steps this callback
takes, under Lightning's names and arguments: ``_monitor_candidates``, ``_should_skip_saving_checkpoint``,
``_should_save_on_train_epoch_end``, ``_save_topk_checkpoint``, ``check_monitor_top_k``, ``_update_best_and_save``,
``_get_metric_interpolated_filepath_name``, ``_save_last_checkpoint``, ``_save_checkpoint``, ``_link_checkpoint``,
``_remove_checkpoint``, ``file_exists``, ``_find_last_checkpoints`` (the files ``ckpt_path="last"`` chooses among),
``format_checkpoint_name`` and ``_format_checkpoint_name``; overriding one changes what the callback does. A
checkpoint is written at the loop's next safe point (docs/checkpoints.md), so ``_save_checkpoint`` returns
before the file is on disk.
"""

# No ``from __future__ import annotations``: the signature's annotations are real types, which argument parsers
# (jsonargparse, LightningCLI) read.
import os
import re
import shutil
import time
from datetime import timedelta
from typing import Any, Literal

import torch

from ember.core.checkpointing.checkpoint import default_checkpoint_dir
from ember.core.errors import ConfigurationError
from ember.hookspecs import hookimpl
from ember.plugins.callbacks import model_checkpoint as _ember
from ember.plugins.callbacks.checkpoint_options import format_name, not_ours


class _AnyModelCheckpoint(type):
    """``isinstance(x, ModelCheckpoint)`` holds for every ember ``ModelCheckpoint``, as Lightning code expects of
    the Trainer's default callback."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if cls.__dict__.get("_covers_ember", False):  # the class itself, not a user's subclass of it
            return isinstance(obj, _ember.ModelCheckpoint)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        if cls.__dict__.get("_covers_ember", False):
            return issubclass(sub, _ember.ModelCheckpoint)
        return super().__subclasscheck__(sub)


def _alias(name: str, doc: str) -> property:
    """Lightning's private attribute name for ember's attribute ``name`` (read and written through)."""
    return property(lambda self: getattr(self, name), lambda self, value: setattr(self, name, value), doc=doc)


def _score(name: str, doc: str) -> property:
    """A score kept as a number (ember's ranking compares numbers) and read as a tensor of the monitored value's
    dtype, as in Lightning: ``tensor(0.3) == 0.3`` holds for a float32 value logged as 0.3, where the float it
    became (0.30000001192092896) does not."""

    def read(self: Any) -> Any:
        value = self.__dict__.get(name)
        if value is None or isinstance(value, torch.Tensor):
            return value
        return torch.tensor(value, dtype=self.__dict__.get("_score_dtype") or torch.get_default_dtype())

    def write(self: Any, value: Any) -> None:
        self.__dict__[name] = value

    return property(read, write, doc=f"{doc[0].upper()}{doc[1:]}: a tensor, as in Lightning.")


class ModelCheckpoint(_ember.ModelCheckpoint, metaclass=_AnyModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` signature and defaults (see the module docstring)."""

    version_last = True
    _covers_ember = True

    @staticmethod
    def _now() -> float:
        return time.monotonic()  # this module's ``time``, as Lightning's callback reads it

    def setup(self, trainer: Any, pl_module: Any = None, stage: str | None = None) -> None:
        if self.save_last == "link" and "://" in self._dirpath_as_given:
            raise ConfigurationError(f"ModelCheckpoint(save_last='link') links files, which is only supported for "
                                     f"local file paths; {self._dirpath_as_given!r} is not one. Use save_last=True.")
        super().setup(trainer, pl_module, stage)

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 monitor: str | None = None, verbose: bool = False, save_last: bool | Literal["link"] | None = None,
                 save_top_k: int = 1, save_on_exception: bool = False, save_weights_only: bool = False,
                 mode: str = "min", auto_insert_metric_name: bool = True, every_n_train_steps: int | None = None,
                 train_time_interval: timedelta | None = None, every_n_epochs: int | None = None,
                 save_on_train_epoch_end: bool | None = None, enable_version_counter: bool = True) -> None:
        super().__init__(dirpath=dirpath, filename=filename, monitor=monitor, verbose=verbose,
                         save_last=save_last,  # type: ignore[arg-type]
                         save_top_k=save_top_k, save_weights_only=save_weights_only, mode=mode,
                         auto_insert_metric_name=auto_insert_metric_name, every_n_train_steps=every_n_train_steps,
                         train_time_interval=train_time_interval, every_n_epochs=every_n_epochs,
                         save_on_train_epoch_end=save_on_train_epoch_end,
                         enable_version_counter=enable_version_counter, save_on_exception=save_on_exception)
        self._dirpath_as_given = os.fspath(dirpath) if dirpath is not None else ""

    current_score = _score("current_score", "the monitored value of the newest ranked checkpoint")
    best_model_score = _score("best_model_score", "the monitored value of the best checkpoint")

    _every_n_train_steps = _alias("every_n_train_steps", "Lightning's name of ``every_n_train_steps``")
    _every_n_epochs = _alias("every_n_epochs", "Lightning's name of ``every_n_epochs``")
    _train_time_interval = _alias("train_time_interval", "Lightning's name of ``train_time_interval``")
    _save_on_train_epoch_end = _alias("save_on_train_epoch_end", "Lightning's name of ``save_on_train_epoch_end``")
    _enable_version_counter = _alias("enable_version_counter", "Lightning's name of ``enable_version_counter``")
    _last_checkpoint_saved = _alias("_last_path_saved", "the path of the newest checkpoint this callback saved")

    # -- hooks, with Lightning's arguments (a subclass calls ``super().on_train_end(trainer, pl_module)``) ---
    def on_train_start(self, trainer: Any, module: Any = None) -> None:
        super().on_train_start(trainer)

    @hookimpl(trylast=True)
    def on_train_batch_end(self, trainer: Any, module: Any = None, outputs: Any = None, batch: Any = None,
                           batch_idx: int = 0) -> None:
        super().on_train_batch_end(trainer)

    @hookimpl(trylast=True)
    def on_train_epoch_end(self, trainer: Any, module: Any = None) -> None:
        super().on_train_epoch_end(trainer)

    @hookimpl(trylast=True)
    def on_validation_end(self, trainer: Any, module: Any = None) -> None:
        super().on_validation_end(trainer)

    @hookimpl(trylast=True)
    def on_train_end(self, trainer: Any, module: Any = None) -> None:
        super().on_train_end(trainer)

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:  # type: ignore[override]
        super().on_exception(trainer, exception)

    # -- ember's steps, each through the method of Lightning's name (which a subclass may override) --------
    def _candidates(self, trainer: Any) -> dict[str, Any]:
        return self._monitor_candidates(trainer)

    def _skip(self, trainer: Any) -> bool:
        return self._should_skip_saving_checkpoint(trainer)

    def _on_train_epoch_end(self, trainer: Any) -> bool:
        return self._should_save_on_train_epoch_end(trainer)

    def _save_top_k(self, trainer: Any, candidates: dict[str, Any]) -> None:
        self._save_topk_checkpoint(trainer, candidates)

    def _in_top_k(self, trainer: Any, current: float) -> bool:
        return self.check_monitor_top_k(trainer, current)

    def _update_and_save(self, trainer: Any, current: float, candidates: dict[str, Any]) -> None:
        self._update_best_and_save(current, trainer, candidates)

    def _unique_path(self, trainer: Any, candidates: dict[str, Any], replaceable: str | None = None) -> str:
        return self._get_metric_interpolated_filepath_name(candidates, trainer, replaceable)

    def _save_last(self, trainer: Any, candidates: dict[str, Any]) -> None:
        self._save_last_checkpoint(trainer, candidates)

    def _save(self, trainer: Any, path: str) -> None:
        self._save_checkpoint(trainer, path)

    def _remove(self, trainer: Any, path: str) -> None:
        reason = not_ours(self, trainer, path)  # it deletes only files this run wrote, as ember's callback
        if reason:
            super()._remove(trainer, path)  # (which says why it keeps the file)
            return
        self.owned_paths.discard(path)
        self._remove_checkpoint(trainer, path)

    def _exists(self, trainer: Any, path: str) -> bool:
        return self.file_exists(path, trainer)

    @hookimpl
    def last_checkpoint_path(self, trainer: Any) -> str | None:
        """``ckpt_path="last"``: this run's ``last.ckpt`` (also while it is being written), else the newest of
        :meth:`_find_last_checkpoints`, as Lightning chooses."""
        if self.dirpath is None:
            return None
        path = self.last_model_path
        if path and (os.path.lexists(path) or path in self._requested):
            return path
        return self._newest_last(trainer) or super().last_checkpoint_path(trainer)

    def _newest_last(self, trainer: Any) -> str | None:
        found = self._find_last_checkpoints(trainer)
        # (lstat: a link made for a save asked for at this step points to a file written at the next safe point)
        return max(found, key=lambda path: os.lstat(path).st_mtime) if found else None

    # -- Lightning's names ----------------------------------------------------------------------------
    def _monitor_candidates(self, trainer: Any) -> dict[str, Any]:
        """The values a checkpoint is named and ranked by: ``trainer.callback_metrics``, ``epoch`` and ``step``."""
        return super()._candidates(trainer)

    def _should_skip_saving_checkpoint(self, trainer: Any) -> bool:
        """True during sanity checking, ``fast_dev_run``, outside ``fit``, or when this step is saved already."""
        return super()._skip(trainer)

    def _should_save_on_train_epoch_end(self, trainer: Any) -> bool:
        """Whether epoch checkpoints are saved in ``on_train_epoch_end`` (else in ``on_validation_end``)."""
        return super()._on_train_epoch_end(trainer)

    def _save_topk_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        """Save a ranked checkpoint (the newest one without ``monitor``) when it belongs in the top k."""
        super()._save_top_k(trainer, monitor_candidates)

    def check_monitor_top_k(self, trainer: Any, current: Any = None) -> bool:
        """Whether ``current`` (the monitored value) enters the top ``save_top_k``."""
        if current is None:
            return False
        return super()._in_top_k(trainer, float(current))

    def _update_best_and_save(self, current: Any, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        """Enter ``current`` in ``best_k_models``, save its checkpoint and remove the one it displaces."""
        value = monitor_candidates.get(self.monitor) if self.monitor else None
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            self._score_dtype = value.dtype  # the scores read back as tensors of the logged value's dtype
        super()._update_and_save(trainer, float(current), monitor_candidates)

    def _get_metric_interpolated_filepath_name(self, monitor_candidates: dict[str, Any], trainer: Any,
                                               del_filepath: str | None = None) -> str:
        """The file name for ``monitor_candidates``, with ``-v1``, ... where a file is there (``del_filepath``
        excepted, the file this save replaces)."""
        return super()._unique_path(trainer, monitor_candidates, del_filepath)

    def _save_last_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        """Write ``last.ckpt`` (``CHECKPOINT_NAME_LAST``), or with ``save_last="link"`` link it to the newest
        checkpoint saved."""
        target = self._last_path_saved
        if self.save_last != "link" or self.save_top_k == 0 or not target or target == self.last_model_path:
            super()._save_last(trainer, monitor_candidates)
            return
        path = self._last_path(trainer, monitor_candidates)
        try:
            self._link_checkpoint(trainer, target, path)
        except OSError:  # neither a link nor a copy (the file is written at the next safe point): a checkpoint
            super()._save_last(trainer, monitor_candidates)
            return
        previous, self.last_model_path = self.last_model_path, path
        self.owned_paths.add(path)
        if previous and previous != path:
            self._remove(trainer, previous)

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        """Ask the Trainer for a checkpoint at ``filepath`` (written at the loop's next safe point during a fit)."""
        super()._save(trainer, filepath)

    @staticmethod
    def _link_checkpoint(trainer: Any, filepath: str, linkpath: str) -> None:
        """Make ``linkpath`` a symbolic link to ``filepath``, relative to the link's folder (replacing a file,
        link or folder there); where links cannot be made, a copy. On process 0; every process waits for it."""
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            if os.path.islink(linkpath) or os.path.isfile(linkpath):
                os.remove(linkpath)
            elif os.path.isdir(linkpath):
                shutil.rmtree(linkpath)
            os.makedirs(os.path.dirname(os.path.abspath(linkpath)), exist_ok=True)
            try:
                os.symlink(os.path.relpath(filepath, os.path.dirname(linkpath)), linkpath)
            except OSError:  # no permission to link (Windows without developer mode): copy instead
                shutil.copy(filepath, linkpath)
        trainer.barrier()

    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        """Delete ``filepath`` (called only for a file this run wrote in this callback's folder)."""
        trainer.remove_checkpoint(filepath)

    def file_exists(self, filepath: str | os.PathLike, trainer: Any) -> bool:
        """Whether ``filepath`` exists (or is this run's save still being written), the same answer on every process."""
        return super()._exists(trainer, os.fspath(filepath))

    def _find_last_checkpoints(self, trainer: Any) -> set[str]:
        """The files of the checkpoint folder named like ``last.ckpt``: ``CHECKPOINT_NAME_LAST`` (its ``{...}``
        fields matching anything), then anything, and ``FILE_EXTENSION``."""
        folder = self.dirpath or default_checkpoint_dir(trainer)
        if not folder or not os.path.isdir(folder):
            return set()
        parts = re.split(r"\{[^}]*\}", self.CHECKPOINT_NAME_LAST)
        starts_like_last = re.compile(".*?".join(map(re.escape, parts)))
        return {os.path.normpath(os.path.join(folder, name)) for name in os.listdir(folder)
                if os.path.splitext(name)[1] == self.FILE_EXTENSION
                and starts_like_last.match(os.path.splitext(name)[0])}

    # -- file names ------------------------------------------------------------------------------------
    def format_checkpoint_name(self, metrics: dict[str, Any], filename: str | None = None,
                               ver: int | None = None, prefix: str | None = None) -> str:
        """The path for ``metrics`` (``{epoch}``, ``{step}``, ``{val_loss:.2f}``, ... filled in by
        :meth:`_format_checkpoint_name`), with ``-v<ver>``, the extension, and the folder."""
        name = self._format_checkpoint_name(filename or self.filename, metrics, prefix=prefix,
                                            auto_insert_metric_name=self.auto_insert_metric_name)
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((name, f"v{ver}"))
        name += self.FILE_EXTENSION
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _format_checkpoint_name(self, filename: str | None, metrics: dict[str, Any], prefix: str | None = None,
                                auto_insert_metric_name: bool = True) -> str:
        """The file name, without folder or extension: the template ``filename`` (``"{epoch}-{step}"`` when
        empty) filled from ``metrics`` (0 for a name they lack), after ``prefix`` and ``CHECKPOINT_JOIN_CHAR``."""
        name = format_name(filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}", metrics,
                           auto_insert_metric_name, self.CHECKPOINT_EQUALS_CHAR)
        return name if prefix is None else self.CHECKPOINT_JOIN_CHAR.join((prefix, name))


__all__ = ["ModelCheckpoint"]
