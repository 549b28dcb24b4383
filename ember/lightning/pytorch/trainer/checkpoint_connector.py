"""``trainer._checkpoint_connector``: the few methods of Lightning's private checkpoint connector that tests and
projects call, each answered by ember's own checkpoint code (``trainer.checkpointing``).

Installed on the Trainer by :func:`ember.lightning._names.lightning_trainer`, i.e. once a script takes the Trainer
through Lightning's names. Restoring a fit's training state (optimizers, loop progress) outside ``fit`` is not one
of them: ember restores it in ``trainer.fit(ckpt_path=...)``, at the point the loop continues from.
"""

from __future__ import annotations

import os
from typing import Any

from ember.core.checkpointing.checkpoint_paths import CheckpointPaths
from ember.core.errors import CheckpointError
from ember.core.loop.run_inputs import default_ckpt_path
from ember.lightning.fabric.utilities.cloud_io import _load


class WeightsOnlyCheckpointError(CheckpointError, KeyError):
    """A checkpoint saved with ``weights_only=True`` was asked to restore a training state (a ``KeyError`` too, as
    Lightning raises)."""

    def __str__(self) -> str:  # a KeyError would quote its message
        return str(self.args[0])


class CheckpointConnector:
    """Lightning's ``trainer._checkpoint_connector``, over ``trainer.checkpointing``."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def dump_checkpoint(self, weights_only: bool = False) -> dict[str, Any]:
        """The checkpoint a save would write now (the callbacks' and module's ``on_save_checkpoint`` called)."""
        return self.trainer.checkpointing.dump(weights_only)  # type: ignore[no-any-return]

    def _parse_ckpt_path(self, state_fn: Any, ckpt_path: Any, model_provided: bool = False,
                         model_connected: bool = False) -> str | None:
        """The file ``ckpt_path`` (``"last"``, ``"best"``, a path) names for ``trainer.<state_fn>()``, as the run
        would choose it. Without a ``ckpt_path``, a fit resumes from ``"last"`` where a failed fit left a checkpoint
        (``OnExceptionCheckpoint``'s file), an evaluation given a model loads nothing, and one of the model already
        connected uses the best checkpoint of its fit where there is one (both with a warning)."""
        t = self.trainer
        t.state.fn = str(getattr(state_fn, "value", state_fn))
        if ckpt_path is None and t.state.fn == "fit":
            ckpt_path = CheckpointPaths.AFTER_FAILURE
        elif ckpt_path is None:
            ckpt_path = None if model_provided else default_ckpt_path(t, None, None, t.state.fn)
            if ckpt_path is None:
                return None
        with t.checkpointing.plugins_registered():
            return t.checkpointing.resolve(ckpt_path)  # type: ignore[no-any-return]

    def _restore_modules_and_callbacks(self, checkpoint_path: str | os.PathLike | None = None) -> None:
        """Load the module's weights and the callbacks' and DataModule's states from ``checkpoint_path``."""
        if checkpoint_path is not None:
            self.trainer.checkpointing.restore_weights_and_plugins(os.fspath(checkpoint_path))

    def restore(self, checkpoint_path: str | os.PathLike | None = None) -> None:
        """Lightning restores a whole training state here; ember does so in ``trainer.fit(ckpt_path=...)``. A
        checkpoint of weights only is refused, as in Lightning."""
        if checkpoint_path is None:
            return
        path = os.fspath(checkpoint_path)
        if _load(path).get("kind") == "weights":
            raise WeightsOnlyCheckpointError(
                f"{path} cannot restore a training state: the checkpoint contains only the model (it was saved "
                "with weights_only=True). Load it with YourModule.load_from_checkpoint(path), or resume from a full "
                "checkpoint.")
        raise NotImplementedError(f"ember restores the training state of {path} in trainer.fit(model, "
                                  "ckpt_path=...), where the fit continues from it; its weights and callback states "
                                  "alone load with trainer._checkpoint_connector._restore_modules_and_callbacks().")


def install(trainer_class: type) -> None:
    """Give ``trainer_class`` the ``_checkpoint_connector`` attribute (once a script takes Lightning's Trainer)."""
    if "_checkpoint_connector" not in vars(trainer_class):
        trainer_class._checkpoint_connector = property(CheckpointConnector)  # type: ignore[attr-defined]
