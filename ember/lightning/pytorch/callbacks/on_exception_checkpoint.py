"""``OnExceptionCheckpoint``: save a checkpoint when a run fails."""

from __future__ import annotations

import os
from typing import Any

from ember.hookspecs import hookimpl
from ember.lightning.pytorch.callbacks.checkpoint import Checkpoint


class OnExceptionCheckpoint(Checkpoint):
    """On an exception in ``fit`` (an error, Ctrl-C or a signal), write ``<dirpath>/<filename>.ckpt`` with the
    state at that moment, to resume from: a later fit given no ``ckpt_path`` resumes from it (with a warning), and
    ``ckpt_path="last"`` reads it where no last checkpoint was kept. A fit that ends normally removes it.

    :param dirpath: the folder.
    :param filename: the file's name without ``.ckpt``.
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError("OnExceptionCheckpoint(filename='') : expected a file name.")
        self.dirpath = os.path.realpath(os.path.expanduser(os.fspath(dirpath)))
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    @hookimpl
    def exception_checkpoint_path(self, trainer: Any) -> str:
        """The file a fit without ``ckpt_path`` resumes from, and ``ckpt_path="last"`` falls back to, when it exists."""
        return self.ckpt_path

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if trainer.state.fn != "fit":
            return
        trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """A run that ended normally leaves no exception checkpoint of an earlier failure behind."""
        if trainer.is_global_zero and os.path.isfile(self.ckpt_path) and trainer.state.fn == "fit":
            os.remove(self.ckpt_path)


__all__ = ["OnExceptionCheckpoint"]
