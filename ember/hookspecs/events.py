"""Event hooks: what happened in the loop, broadcast to every registered plugin.

The names and meaning are Lightning 2.x's ``Callback`` and ``ModelHooks``. Every plugin may implement any of
them; so may the user's module, its DataModule and Lightning-style callbacks, by defining a method with the
hook's name (no marker needed for event hooks). An implementation takes any subset of the spec's arguments,
by name. Return values are ignored unless the spec says otherwise.

Order between implementations: the Trainer's ``plugins`` and then its ``callbacks``, each in the order
given, then always-on plugins by identity, then the module, the DataModule (which runs first for
``prepare_data``, ``setup`` and ``teardown``) and the role plugins; ``tryfirst``/``trylast`` move an
implementation to the front or back. The order never depends on the order packages were installed in.

One ``fit`` drives the events in this order (``*`` marks a per-micro-batch event, ``+`` a per-optimizer-step
event)::

    prepare_data                               (local rank 0)
    setup(stage="fit")
    configure_model                            (inside the strategy's model_sharded_context)
    on_fit_start
    on_sanity_check_start                      (num_sanity_val_steps > 0 and validation data)
        on_validation_model_eval, on_validation_start, on_validation_epoch_start,
        [on_validation_batch_start, validation_step, on_validation_batch_end] ...,
        on_validation_epoch_end, on_validation_end, on_validation_model_train
    on_sanity_check_end
    on_train_start
    for each epoch:
        on_train_epoch_start
        for each batch:
            on_before_batch_transfer, batch_to_device, on_after_batch_transfer     *
            on_train_batch_start          (returning -1 ends the epoch)            *
            training_step                                                          *
            on_before_zero_grad, zero_grad   (first micro-batch of a window)       +
            on_before_backward, backward, on_after_backward                        *
            unscale_gradients, on_before_optimizer_step, clip_gradients,
            optimizer_step                   (last micro-batch of a window)        +
            scheduler step                   (interval="step")                     +
            on_train_batch_end                                                     *
            [validation run, as above, at val_check_interval]
        on_train_epoch_end    (callbacks, then the module, then trylast monitors)
    on_train_end
    on_fit_end
    teardown(stage="fit")

``validate``/``test``/``predict`` run ``setup(stage)``, the evaluation run for that stage, and
``teardown(stage)``. On an exception anywhere in a run, ``on_exception`` runs and the exception propagates
(``KeyboardInterrupt`` too: Ctrl-C during a fit first stops at the next safe point, see
``ember.core.signals``); ``teardown`` runs in every case.
"""

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


# ---------------------------------------------------------------------------------------------------------
# Validation, test and predict
# ---------------------------------------------------------------------------------------------------------


@hookspec
def on_validation_model_eval(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of every validation run, before ``on_validation_start``; the module is already in
    eval mode (set by the loop, so an implementation need not call ``module.eval()``).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_model_train(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of a validation run inside ``fit``, after the module is back in train mode.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_test_model_eval(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of a test run, before ``on_test_start``, with the module in eval mode.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_predict_model_eval(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of a predict run, before ``on_predict_start``, with the module in eval mode.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_start(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of every validation run (sanity check, inside ``fit``, or ``validate``).

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_end(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of every validation run, after ``on_validation_epoch_end``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_epoch_start(trainer: TrainerLike, module: Any) -> None:
    """Called once per validation run, before its first batch.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_epoch_end(trainer: TrainerLike, module: Any) -> None:
    """Called once per validation run, after its last batch; the run's epoch metrics are computed by then.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_batch_start(trainer: TrainerLike, module: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
    """Called per validation batch, after device transfer and before ``validation_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


@hookspec
def on_validation_batch_end(
    trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int
) -> None:
    """Called per validation batch, after ``validation_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param outputs: what ``validation_step`` returned.
    :param batch: the batch.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


@hookspec
def on_test_start(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of a test run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_test_end(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of a test run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_test_epoch_start(trainer: TrainerLike, module: Any) -> None:
    """Called once per test run, before its first batch.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_test_epoch_end(trainer: TrainerLike, module: Any) -> None:
    """Called once per test run, after its last batch; the run's epoch metrics are computed by then.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_test_batch_start(trainer: TrainerLike, module: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
    """Called per test batch, after device transfer and before ``test_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


@hookspec
def on_test_batch_end(
    trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int
) -> None:
    """Called per test batch, after ``test_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param outputs: what ``test_step`` returned.
    :param batch: the batch.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


@hookspec
def on_predict_start(trainer: TrainerLike, module: Any) -> None:
    """Called at the start of a predict run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_predict_end(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of a predict run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_predict_epoch_start(trainer: TrainerLike, module: Any) -> None:
    """Called once per predict run, before its first batch.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_predict_epoch_end(trainer: TrainerLike, module: Any) -> None:
    """Called once per predict run, after its last batch.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_predict_batch_start(trainer: TrainerLike, module: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
    """Called per predict batch, after device transfer and before ``predict_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


@hookspec
def on_predict_batch_end(
    trainer: TrainerLike, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int
) -> None:
    """Called per predict batch, after ``predict_step``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    :param outputs: what ``predict_step`` returned.
    :param batch: the batch.
    :param batch_idx: index of the batch within its loader.
    :param dataloader_idx: index of the loader.
    """


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
