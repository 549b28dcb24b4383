"""Role hooks: the work of the accelerator, precision, strategy and checkpoint-storage plugins.

Each role hook is ``firstresult``: the first implementation that returns something other than None answers
it. The active plugin of the role implements it; ember's core registers a ``trylast`` fallback
(identity ``core.defaults``) that answers every role hook the plain PyTorch way, so a role plugin implements
only what it changes. Any plugin may wrap a role hook with ``@hookimpl(wrapper=True)`` to act around it
(``result = yield`` returns the answer); the 16-mixed precision, for example, wraps ``step`` in
``torch.autocast``. Wrappers nest in the order implementations run (see :mod:`ember.hookspecs.events`): the
first is the outermost.

Role hooks are not called as Lightning-style method hooks: a module or callback must mark an implementation
with ``@ember.hookimpl`` to take part.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from ember.core.trainer import Trainer


# ---------------------------------------------------------------------------------------------------------
# Accelerator: where tensors live
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def root_device(trainer: Trainer) -> torch.device:
    """Answer the device this process computes on.

    Called once per run, before ``setup``. The accelerator answers from ``trainer.devices`` and the local
    rank; a strategy may answer first.

    :param trainer: the trainer.
    :returns: a ``torch.device``. Stops at first non-None result.
    """


@hookspec
def setup_device(trainer: Trainer, device: torch.device) -> None:
    """Prepare the device for use (e.g. ``torch.cuda.set_device``).

    Called once per run on every rank, after ``root_device``, before the module is moved.

    :param trainer: the trainer.
    :param device: the run's device.
    """


@hookspec(firstresult=True)
def batch_to_device(trainer: Trainer, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
    """Move a batch to the device (Lightning's ``transfer_batch_to_device``).

    Called per micro-batch, every stage, between ``on_before_batch_transfer`` and
    ``on_after_batch_transfer``. The fallback moves every tensor in nested lists, tuples, dicts and
    dataclasses with ``non_blocking=True`` where the device is not the CPU.

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
def convert_module(trainer: Trainer, module: torch.nn.Module) -> torch.nn.Module | None:
    """Convert the module's parameters for the precision (e.g. ``module.double()`` under 64-true).

    Called once per run, after ``configure_model`` and the move to the device, before the strategy wraps
    the module and before ``configure_optimizers``.

    :param trainer: the trainer.
    :param module: the module.
    :returns: the converted module (may be the same object), or None to leave it. Stops at first non-None
        result.
    """


@hookspec(firstresult=True)
def convert_input(trainer: Trainer, data: Any) -> Any:
    """Convert the floating-point tensors of a batch for the precision (e.g. to float64 under 64-true).

    Called per micro-batch, every stage, after ``on_after_batch_transfer``. Only called when implemented.

    :param trainer: the trainer.
    :param data: the batch.
    :returns: the converted batch, or None to leave it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def step(trainer: Trainer, model: Any, module: Any, batch: Any, batch_idx: int, dataloader_idx: int, stage: str) -> Any:
    """Run one ``training_step``/``validation_step``/``test_step``/``predict_step`` of the module.

    Called per micro-batch. ``stage`` is ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``. The
    fallback calls the module's method for the stage. Precisions wrap this hook to enter ``torch.autocast``;
    a strategy may answer it to run the step through its wrapped model (``model``).

    :param trainer: the trainer.
    :param model: the model as wrapped by the strategy (the module itself under single-device).
    :param module: the user's module.
    :param batch: the batch, on the device.
    :param batch_idx: index of the batch.
    :param dataloader_idx: index of the loader.
    :param stage: the stage.
    :returns: the step's output; ``None`` from a training step skips backward and the optimizer step.
        Stops at first non-None result, so an implementation that runs the step itself must answer with the
        fallback's protocol in mind: prefer ``wrapper=True`` (``output = yield``), which sees None too.
    """


@hookspec(firstresult=True)
def backward(trainer: Trainer, loss: torch.Tensor, optimizer: torch.optim.Optimizer | None) -> Any:
    """Compute gradients of ``loss``.

    Called per micro-batch under automatic optimization, and by ``module.manual_backward``, between
    ``on_before_backward`` and ``on_after_backward``. The fallback calls ``loss.backward()``; 16-mixed scales
    the loss first.

    :param trainer: the trainer.
    :param loss: the loss, divided by ``accumulate_grad_batches``.
    :param optimizer: the optimizer the loss belongs to (None where unknown, e.g. manual optimization).
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def unscale_gradients(trainer: Trainer, optimizer: torch.optim.Optimizer) -> Any:
    """Undo loss scaling on the optimizer's gradients, in place.

    Called once per optimizer step, right before ``on_before_optimizer_step``. Only 16-mixed does anything.

    :param trainer: the trainer.
    :param optimizer: the optimizer about to step.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def clip_gradients(
    trainer: Trainer, module: Any, optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str
) -> Any:
    """Clip the gradients of the optimizer's parameters, in place.

    Called once per optimizer step, after ``on_before_optimizer_step`` and before ``optimizer_step``, when
    ``gradient_clip_val`` is set (or from ``module.clip_gradients``). ``algorithm`` is ``"norm"`` or
    ``"value"``. A sharding strategy answers it to clip across shards.

    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer about to step.
    :param clip_val: the threshold.
    :param algorithm: ``"norm"`` (total 2-norm) or ``"value"`` (element-wise).
    :returns: the total norm before clipping for ``"norm"``, else True. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def optimizer_step(trainer: Trainer, module: Any, optimizer: torch.optim.Optimizer) -> Any:
    """Step the optimizer.

    Called once per optimizer step, after ``clip_gradients``. The fallback calls ``optimizer.step()``;
    16-mixed steps through its gradient scaler (which may skip the step on inf/NaN gradients).

    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def zero_grad(trainer: Trainer, module: Any, optimizer: torch.optim.Optimizer) -> Any:
    """Zero the optimizer's gradients.

    Called once per optimizer step under automatic optimization, after ``on_before_zero_grad``. The fallback
    calls ``optimizer.zero_grad(set_to_none=True)``.

    :param trainer: the trainer.
    :param module: the user's module.
    :param optimizer: the optimizer.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------------
# Strategy: how work is spread over processes
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def distributed_info(trainer: Trainer) -> dict | None:
    """Answer this process's place in the job.

    Called once per run, first, on every rank. The active cluster environment (``environment.torchrun``,
    ``environment.slurm``, ``environment.local``) answers it from what its launcher set (environment
    variables); the fallback answers a single process. A strategy wraps it (``info = yield``) to read the
    answer: that is how strategies learn the job's shape without calling the environment.

    :param trainer: the trainer.
    :returns: a dict with ``global_rank``, ``local_rank``, ``node_rank`` and ``world_size``, and optionally
        ``local_world_size`` (processes on this node), ``num_nodes``, ``main_address`` and ``main_port``
        (where global rank 0 hosts the process group's rendezvous), and ``launched`` (True when this process
        is one of a job's processes started by a launcher or by hand; False or missing in a process the user
        started alone, from which a strategy may start the job with ``launch``). Stops at first non-None
        result.
    """


@hookspec(firstresult=True)
def launch(trainer: Trainer, fn: str) -> int | None:
    """Start the job's processes from a process that is not one of them, and wait for them to finish.

    Called once per run, right after ``distributed_info`` and before ``setup_environment``, only when a
    plugin implements it. A multi-process strategy answers it when ``distributed_info`` says this process
    was not ``launched`` but the run asks for several processes (``Trainer(devices=N)``): it starts them
    (they re-run the program, find themselves ``launched`` and run the loop), waits, and answers their exit
    status. Core then ends this process with that status (``SystemExit``) without running the loop or any
    other hook: the started processes did the work. A failure in a started process is raised from here, as
    an exception naming the rank and the original error (``on_exception`` then runs as for any error).

    :param trainer: the trainer.
    :param fn: the entry point being run: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :returns: the job's exit status, or None to run the loop in this process. Stops at first non-None
        result.
    """


@hookspec
def setup_environment(trainer: Trainer) -> None:
    """Bring up what the strategy needs (e.g. the process group). Called once per run, before
    ``prepare_data``, on every rank.

    :param trainer: the trainer.
    """


@hookspec(firstresult=True)
def model_sharded_context(trainer: Trainer) -> AbstractContextManager | None:
    """Answer a context manager that ``configure_model`` runs inside (e.g. to build on the meta device).

    Called once per run.

    :param trainer: the trainer.
    :returns: a context manager, or None for none. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def setup_module(trainer: Trainer, module: torch.nn.Module) -> Any:
    """Wrap the module for the strategy (e.g. in ``DistributedDataParallel``).

    Called once per ``fit``, after ``convert_module`` and ``configure_optimizers``. The answer is passed to
    ``step`` as ``model``.

    :param trainer: the trainer.
    :param module: the module on its device.
    :returns: the wrapped model, or None to use the module as is. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def process_dataloader(trainer: Trainer, dataloader: Any, stage: str) -> Any:
    """Adapt a data loader to the strategy (e.g. add a ``DistributedSampler``).

    Called once per loader and run, before the first batch is drawn from it.

    :param trainer: the trainer.
    :param dataloader: the loader.
    :param stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :returns: the loader to use, or None to keep it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def reduce(trainer: Trainer, tensor: torch.Tensor, op: str) -> torch.Tensor:
    """Reduce a tensor over all processes (``op``: ``"mean"``, ``"sum"``, ``"max"``, ``"min"``).

    Called when a plugin or ``self.log(..., sync_dist=True)`` asks; on every rank (a collective). The
    fallback returns the tensor unchanged.

    :param trainer: the trainer.
    :param tensor: the local tensor.
    :param op: the reduction.
    :returns: the reduced tensor. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def all_gather(trainer: Trainer, tensor: torch.Tensor, sync_grads: bool) -> torch.Tensor:
    """Gather a tensor from all processes, stacked on a new first dimension of size ``world_size``.

    A collective: call it on every rank. The fallback adds the leading dimension of size 1.

    :param trainer: the trainer.
    :param tensor: the local tensor.
    :param sync_grads: whether gradients flow back through the gather.
    :returns: the gathered tensor. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def broadcast(trainer: Trainer, obj: Any, src: int) -> Any:
    """Send a picklable object from rank ``src`` to all ranks. A collective.

    :param trainer: the trainer.
    :param obj: the object (ignored on ranks other than ``src``).
    :param src: the sending rank.
    :returns: the object as sent by ``src``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def barrier(trainer: Trainer, name: str | None) -> Any:
    """Wait until every process reaches this point. A collective.

    :param trainer: the trainer.
    :param name: an optional name for error messages.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def reduce_boolean_decision(trainer: Trainer, decision: bool, all: bool) -> bool | None:
    """Agree on a decision across processes: every rank's (``all=True``) or any rank's (``all=False``).

    A collective; used for ``should_stop`` and by monitoring callbacks.

    :param trainer: the trainer.
    :param decision: this rank's decision.
    :param all: require all ranks (True) or any rank (False).
    :returns: the agreed decision. Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------------
# Checkpoint storage
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def save_checkpoint(trainer: Trainer, checkpoint: dict, path: str) -> Any:
    """Write a checkpoint dict to ``path`` atomically (never leaving a partial file at ``path``).

    Called once per save, on the ranks the strategy says write (rank 0 for single-file checkpoints).

    :param trainer: the trainer.
    :param checkpoint: the checkpoint.
    :param path: the destination.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def load_checkpoint(trainer: Trainer | None, path: str, weights_only: bool) -> dict:
    """Read a checkpoint dict from ``path``.

    :param trainer: the trainer, or None when loading outside a run (``Module.load_from_checkpoint``).
    :param path: the file.
    :param weights_only: refuse anything but tensors and plain containers (the default).
    :returns: the checkpoint dict. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def remove_checkpoint(trainer: Trainer, path: str) -> Any:
    """Delete a checkpoint written by ``save_checkpoint``.

    :param trainer: the trainer.
    :param path: the file.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec
def last_checkpoint_path(trainer: Trainer) -> str | None:
    """Answer the path of the "last" checkpoint a plugin keeps (``last.ckpt`` of a checkpoint callback).

    Called on every rank when ``fit``/``validate``/``test``/``predict`` resolve ``ckpt_path="last"`` (after
    ``setup``; the newest existing answer is read), whenever requested checkpoints are written (the answered
    files are written after the others), and when a fit stops on a signal (the checkpoint is written to every
    answered path). Every implementation answers; with no answer, core uses
    ``<default_root_dir>/checkpoints/last.ckpt``.

    :param trainer: the trainer.
    :returns: a path, which need not exist yet, or None.
    """


@hookspec(firstresult=True)
def requeue(trainer: Trainer, signum: int, checkpoint_path: str | None, requested: bool) -> Any:
    """Ask the cluster to run this job again after it stops on a signal (e.g. ``scontrol requeue``).

    Called once, on every rank, after a fit wrote its checkpoint at the safe point following a signal and
    before it raises (``KeyboardInterrupt`` after Ctrl-C, ``ember.core.signals.SignalExit`` otherwise).
    Answered by a cluster-environment plugin; nothing happens when none answers. ``requested`` is True when whoever asked for the stop (through
    ``ember.core.signals.request_stop(..., requeue=True)``) wants a requeue; an environment may also decide
    from ``signum`` alone.

    :param trainer: the trainer.
    :param signum: the signal that stopped the fit.
    :param checkpoint_path: the checkpoint written, which the requeued job resumes from with
        ``ckpt_path="last"``.
    :param requested: a requeue was asked for explicitly.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------------
# Loggers
# ---------------------------------------------------------------------------------------------------------


@hookspec
def log_metrics(trainer: Trainer, metrics: dict, step: int) -> None:
    """Record metrics (broadcast to every logger plugin: several loggers may be active at once).

    Called on global rank 0: every ``log_every_n_steps`` optimizer steps with the step values logged during
    that step, and after each training epoch and each validation/test run with the epoch values; ``metrics``
    also holds ``epoch``. Values are Python floats, read off the device in one transfer only because a
    logger implements this hook: with no logger, the loop reads nothing.

    :param trainer: the trainer.
    :param metrics: name to float.
    :param step: the ``global_step`` the values belong to.
    """


@hookspec
def log_hyperparams(trainer: Trainer, params: dict) -> None:
    """Record the run's hyperparameters: the module's ``hparams`` merged with the DataModule's.

    Called once per ``fit``, on global rank 0, after ``configure_optimizers`` and before ``on_fit_start``.

    :param trainer: the trainer.
    :param params: name to value.
    """
