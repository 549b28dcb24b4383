"""Role hooks: accelerator: where tensors live; precision: which dtype the math runs in. See :mod:`ember.hookspecs.roles`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from ember.hookspecs.trainer import TrainerLike


# ---------------------------------------------------------------------------------------------------------
# Accelerator: where tensors live
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def root_device(trainer: TrainerLike) -> torch.device:
    """Answer the device this process computes on.

    Called once per run, before ``setup``. The accelerator answers from ``trainer.devices`` and the local
    rank; a strategy may answer first.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: a ``torch.device``. Stops at first non-None result.
    """


@hookspec
def setup_device(trainer: TrainerLike, device: torch.device) -> None:
    """Prepare the device for use (e.g. ``torch.cuda.set_device``).

    Called once per run on every rank, after ``root_device``, before the module is moved.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param device: the run's device.
    """


@hookspec(firstresult=True)
def batch_to_device(trainer: TrainerLike, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
    """Move a batch to the device (Lightning's ``transfer_batch_to_device``).

    Called per micro-batch, every stage, between ``on_before_batch_transfer`` and
    ``on_after_batch_transfer``. The fallback moves every tensor in nested lists, tuples, dicts and
    dataclasses with ``non_blocking=True`` where the device is not the CPU.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param batch: the batch.
    :param device: the run's device.
    :param dataloader_idx: index of the loader the batch came from.
    :returns: the batch on the device. Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------------
# Precision: which dtype the math runs in
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def convert_module(trainer: TrainerLike, module: torch.nn.Module) -> torch.nn.Module | None:
    """Convert the module's parameters for the precision (e.g. ``module.double()`` under 64-true).

    Called once per run, after ``configure_model`` and the move to the device, before the strategy wraps
    the module and before ``configure_optimizers``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param module: the module.
    :returns: the converted module (may be the same object), or None to leave it. Stops at first non-None
        result.
    """


@hookspec(firstresult=True)
def convert_input(trainer: TrainerLike, data: Any) -> Any:
    """Convert the floating-point tensors of a batch for the precision (e.g. to float64 under 64-true).

    Called per micro-batch, every stage, after ``on_after_batch_transfer``. Only called when implemented.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param data: the batch.
    :returns: the converted batch, or None to leave it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def mixed_precision_dtype(trainer: TrainerLike) -> torch.dtype | None:
    """The dtype a mixed precision computes in while the parameters stay float32 (``torch.bfloat16`` under
    bf16-mixed, ``torch.float16`` under 16-mixed).

    Asked by a strategy that casts parameters itself (FSDP's ``MixedPrecisionPolicy``), once per fit, so that it
    follows the precision without knowing the precision plugins. Only called when implemented.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: the compute dtype, or None when the precision is not a mixed one. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def step(trainer: TrainerLike, model: Any, module: Any, batch: Any, batch_idx: int, dataloader_idx: int, stage: str) -> Any:
    """Run one ``training_step``/``validation_step``/``test_step``/``predict_step`` of the module.

    Called per micro-batch. ``stage`` is ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``. The
    fallback calls the module's method for the stage, or, for the training stage, ``model(batch, batch_idx)``
    when the strategy's ``setup_module`` answered a model other than the module. Precisions wrap this hook to
    enter ``torch.autocast``; a strategy may wrap it too (DDP skips the gradient sync while accumulating).

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param model: the model as wrapped by the strategy (the module itself under single-device).
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch.
    :param dataloader_idx: index of the loader.
    :param stage: the stage.
    :returns: the step's output; ``None`` from a training step skips the backward (the optimizer step still
        runs and counts, as in Lightning). Stops at first non-None result, so an implementation that runs the step itself must answer with the
        fallback's protocol in mind: prefer ``wrapper=True`` (``output = yield``), which sees None too.
    """


@hookspec(firstresult=True)
def backward(trainer: TrainerLike, loss: torch.Tensor, optimizer: torch.optim.Optimizer | None) -> Any:
    """Compute gradients of ``loss``.

    Called per micro-batch under automatic optimization, and by ``module.manual_backward``, between
    ``on_before_backward`` and ``on_after_backward``. The fallback calls ``loss.backward()``; 16-mixed scales
    the loss first.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param loss: the loss, divided by ``accumulate_grad_batches``.
    :param optimizer: the optimizer the loss belongs to (None where unknown, e.g. manual optimization).
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def unscale_gradients(trainer: TrainerLike, optimizer: torch.optim.Optimizer) -> Any:
    """Undo loss scaling on the optimizer's gradients, in place.

    Called once per optimizer step, right before ``on_before_optimizer_step``. Only 16-mixed does anything.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param optimizer: the optimizer about to step.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def clip_gradients(
    trainer: TrainerLike, module: Any, optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str
) -> Any:
    """Clip the gradients of the optimizer's parameters, in place.

    Called once per optimizer step, after ``on_before_optimizer_step`` and before ``optimizer_step``, when
    ``gradient_clip_val`` is set (or from ``module.clip_gradients``). ``algorithm`` is ``"norm"`` or
    ``"value"``. A sharding strategy answers it to clip across shards.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer about to step.
    :param clip_val: the threshold.
    :param algorithm: ``"norm"`` (total 2-norm) or ``"value"`` (element-wise).
    :returns: the total norm before clipping for ``"norm"``, else True. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def optimizer_step(trainer: TrainerLike, module: Any, optimizer: torch.optim.Optimizer) -> Any:
    """Step the optimizer.

    Called once per optimizer step, after ``clip_gradients``. The fallback calls ``optimizer.step()``;
    16-mixed steps through its gradient scaler (which may skip the step on inf/NaN gradients). Where the loop
    hands the optimizer a closure (``trainer.loop.training.step_closure`` is set: an optimizer that evaluates the
    loss itself, such as LBFGS or one whose ``step`` is its own), the closure runs the training step and backward
    and must be given to ``optimizer.step(closure=...)`` or called before the step. An implementation that steps
    the optimizer may keep what its ``step`` returned in ``trainer.loop.training.step_result``: ``opt.step()``
    returns it under manual optimization.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def zero_grad(trainer: TrainerLike, module: Any, optimizer: torch.optim.Optimizer) -> Any:
    """Zero the optimizer's gradients.

    Called once per optimizer step under automatic optimization, after ``on_before_zero_grad``. The fallback
    calls ``optimizer.zero_grad(set_to_none=True)``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """
