"""Event hooks: set-up and tear-down; training; backward and the optimizer step; batch transfer. See :mod:`ember.hookspecs.events`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from ember.hookspecs.trainer import TrainerLike


# ---------------------------------------------------------------------------------------------------------
# Set-up and tear-down
# ---------------------------------------------------------------------------------------------------------


@hookspec
def prepare_data(trainer: TrainerLike) -> None:
    """Download or write data to disk, once per machine.

    Called at the start of every run, before ``setup``, on local rank 0 only; other ranks wait at a barrier.
    Do not assign state here: it does not reach the other processes.

    :ranks: local rank 0 of each node; the other ranks wait at a barrier
    :wrap: yes
    :param trainer: the running trainer.

    Wrapping is allowed.
    """


@hookspec
def setup(trainer: TrainerLike, module: Any, stage: str) -> None:
    """Set up for a run (``stage`` is ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``).

    Called once per run on every rank, after ``prepare_data`` and the process group is up, before the module
    is moved to its device and before ``configure_model``. The DataModule's ``setup`` runs first.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param stage: the run's stage.
    """


@hookspec
def configure_model(trainer: TrainerLike, module: Any) -> None:
    """Build the model's layers late, inside the strategy's ``model_sharded_context``.

    Called once per run on every rank, after ``setup`` and before ``configure_optimizers``. Use it for models
    too large to build on one device: create layers here so a sharding strategy can place them directly.
    Must be idempotent: it runs again for each ``fit``/``validate``/``test``/``predict`` call.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def teardown(trainer: TrainerLike, module: Any, stage: str) -> None:
    """Release what ``setup`` acquired.

    Called once per run on every rank, last, also after an exception.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param stage: the run's stage.
    """


@hookspec
def on_fit_start(trainer: TrainerLike, module: Any) -> None:
    """Called once at the very beginning of ``fit``, after ``configure_optimizers`` and before sanity checking.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_fit_end(trainer: TrainerLike, module: Any) -> None:
    """Called once at the very end of ``fit``, after ``on_train_end``, before ``teardown``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_sanity_check_start(trainer: TrainerLike, module: Any) -> None:
    """Called before the sanity validation run of ``fit`` (``num_sanity_val_steps`` batches).

    Not called when there is no validation data or ``num_sanity_val_steps`` is 0.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer (``trainer.sanity_checking`` is True until ``on_sanity_check_end``).
    :param module: the user's module.
    """


@hookspec
def on_sanity_check_end(trainer: TrainerLike, module: Any) -> None:
    """Called after the sanity validation run of ``fit``; its metrics are discarded right after.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


# ---------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------


@hookspec
def on_train_start(trainer: TrainerLike, module: Any) -> None:
    """Called once per ``fit`` after the sanity check, before the first training epoch.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_train_end(trainer: TrainerLike, module: Any) -> None:
    """Called once per ``fit`` after the last training epoch (also when ``should_stop`` ended it).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_train_epoch_start(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of every training epoch, with the module in train mode.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer; ``trainer.current_epoch`` is the epoch about to run.
    :param module: the user's module.
    """


@hookspec
def on_train_epoch_end(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of every training epoch, after the epoch's validation run.

    Order: callbacks and plugins, then the module, then ``trylast`` implementations. Monitoring callbacks
    (checkpointing, early stopping) use ``trylast`` so that they see what the module logged here. Epoch
    metrics logged in ``training_step`` are in ``trainer.callback_metrics`` when this is called.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_train_batch_start(trainer: TrainerLike, module: Any, batch: Any, batch_idx: int) -> int | None:
    """Called per micro-batch, after the batch is on its device and before ``training_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch within the epoch.
    :returns: ``-1`` to end the current epoch before this batch is used; anything else is ignored. If any
        implementation returns ``-1`` the epoch ends.
    """


@hookspec
def on_train_batch_end(trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
    """Called per micro-batch, after backward, the optimizer step (when one was due) and the scheduler step.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer; ``trainer.global_step`` already counts this batch's step.
    :param module: the user's module.
    :param outputs: what ``training_step`` returned, normalised to a dict with a ``"loss"`` key (or None).
    :param batch: the batch.
    :param batch_idx: index of the batch within the epoch.
    """


# ---------------------------------------------------------------------------------------------------------
# Backward and the optimizer step
# ---------------------------------------------------------------------------------------------------------


@hookspec
def on_before_zero_grad(trainer: TrainerLike, module: Any, optimizer: torch.optim.Optimizer) -> None:
    """Called before gradients are zeroed, once per optimizer step and optimizer.

    Under automatic optimization: after ``training_step`` on the first micro-batch of an accumulation window,
    before ``zero_grad``. Inspect the gradients of the previous step here.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param optimizer: the optimizer whose gradients are about to be zeroed.
    """


@hookspec
def on_before_backward(trainer: TrainerLike, module: Any, loss: torch.Tensor) -> None:
    """Called per micro-batch right before ``backward``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param loss: the loss about to be backpropagated, already divided by ``accumulate_grad_batches``, not
        yet scaled by a gradient scaler.
    """


@hookspec
def on_after_backward(trainer: TrainerLike, module: Any) -> None:
    """Called per micro-batch right after ``backward``, before any unscaling or clipping.

    Under 16-mixed the gradients are still multiplied by the scaler's factor here; under accumulation they
    are the sum so far. Inspect unscaled gradients in ``on_before_optimizer_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_before_optimizer_step(trainer: TrainerLike, module: Any, optimizer: torch.optim.Optimizer) -> None:
    """Called once per optimizer step, before gradient clipping and the step.

    Gradients are unscaled (16-mixed) and not yet clipped: this is the place to log gradient norms.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer; ``trainer.global_step`` does not yet count this step.
    :param module: the user's module.
    :param optimizer: the optimizer about to step.
    """


# ---------------------------------------------------------------------------------------------------------
# Batch transfer
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def on_before_batch_transfer(trainer: TrainerLike, module: Any, batch: Any, dataloader_idx: int) -> Any:
    """Alter a batch before it is moved to the device (per micro-batch, every stage).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch as the loader yielded it.
    :param dataloader_idx: index of the loader the batch came from.
    :returns: the batch to use instead, or None to keep it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def on_after_batch_transfer(trainer: TrainerLike, module: Any, batch: Any, dataloader_idx: int) -> Any:
    """Alter a batch after it is on the device, e.g. for GPU augmentation (per micro-batch, every stage).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch on the device.
    :param dataloader_idx: index of the loader the batch came from.
    :returns: the batch to use instead, or None to keep it. Stops at first non-None result.
    """
