"""Event hooks: exceptions and checkpoints. See :mod:`ember.hookspecs.events`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from ember.hookspecs.trainer import TrainerLike


# ---------------------------------------------------------------------------------------------------------
# Exceptions and checkpoints
# ---------------------------------------------------------------------------------------------------------


@hookspec
def on_exception(trainer: TrainerLike, module: Any, exception: BaseException) -> None:
    """Called once when a run raises (``KeyboardInterrupt`` included), on the rank that raised.

    Every implementation runs even if an earlier one raises; the original exception then propagates
    (a ``KeyboardInterrupt`` too). ``teardown`` follows.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param exception: the exception.
    """


@hookspec
def on_save_checkpoint(trainer: TrainerLike, module: Any, checkpoint: dict) -> None:
    """Add to a checkpoint before it is written; called once per save on every rank.

    For changing the checkpoint itself; a plugin's own state goes through its ``state_dict()`` and
    ``load_state_dict(state)`` methods instead, which ember calls once per save and once per resume (kept
    under ``checkpoint["plugins"][state_key or identity]``). Values must be tensors or plain containers of
    numbers and strings (checkpoints load with ``weights_only=True``).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param checkpoint: the checkpoint dict, to be modified in place.
    """


@hookspec
def on_load_checkpoint(trainer: TrainerLike, module: Any, checkpoint: dict) -> None:
    """Restore from a checkpoint; called once per load, after the module's weights are loaded.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param checkpoint: the loaded checkpoint dict.
    """
