"""Event hooks: validation, test and predict. See :mod:`ember.hookspecs.events`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from ember.hookspecs.trainer import TrainerLike


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
    """Called at the end of every validation run (inside ``fit`` and after ``trainer.validate()``, as in
    Lightning), after the module is back in the mode it had before the run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the running trainer.
    :param module: the user's module.
    """


@hookspec
def on_validation_model_zero_grad(trainer: TrainerLike, module: Any) -> None:
    """Called inside ``fit`` before each validation run that follows training batches (not the sanity check),
    when no accumulation window is open, before ``on_validation_model_eval``. The module's gradients are dropped
    here (``module.zero_grad()``) to free their memory while validation runs, as in Lightning: ``ember.Module``'s
    default, done by the loop where no implementation is registered; an override replaces it.

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
def on_test_model_train(trainer: TrainerLike, module: Any) -> None:
    """Called at the end of every test run, after ``on_test_end``, with the module back in the mode it had before
    the run.

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
