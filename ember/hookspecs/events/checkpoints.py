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
    """Restore from a checkpoint; called once per load, in two parts (as in Lightning).

    The module's implementation runs first, alone, before the module's weights are loaded, so that it may change
    the checkpoint (rename or convert ``checkpoint["state_dict"]``); the other plugins' run (and wrappers wrap
    them) after the weights are loaded. When a fit resumes, both run after ``configure_model`` and before the
    plugins' ``load_state_dict`` and ``configure_optimizers``: the optimizers, schedulers and the loop's
    counters (``global_step``, ...) are restored later, before ``on_fit_start``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param checkpoint: the loaded checkpoint dict.
    """
