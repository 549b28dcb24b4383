"""Role hooks: strategy: how work is spread over processes. See :mod:`ember.hookspecs.roles`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from ember.hookspecs.trainer import TrainerLike


# ---------------------------------------------------------------------------------------------------------
# Strategy: how work is spread over processes
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def distributed_info(trainer: TrainerLike) -> dict | None:
    """Answer this process's place in the job.

    Called once per run, first, on every rank. The active cluster environment (``environment.torchrun``,
    ``environment.slurm``, ``environment.local``) answers it from what its launcher set (environment
    variables); the fallback answers a single process. A strategy wraps it (``info = yield``) to read the
    answer: that is how strategies learn the job's shape without calling the environment.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: a dict with ``global_rank``, ``local_rank``, ``node_rank`` and ``world_size``, and optionally
        ``local_world_size`` (processes on this node), ``num_nodes``, ``main_address`` and ``main_port``
        (where global rank 0 hosts the process group's rendezvous), and ``launched`` (True when this process
        is one of a job's processes started by a launcher or by hand; False or missing in a process the user
        started alone, from which a strategy may start the job with ``launch``). Stops at first non-None
        result.
    """


@hookspec(firstresult=True)
def launch(trainer: TrainerLike, fn: str) -> Any:
    """Start the job's processes from a process that is not one of them, and wait for them to finish.

    Called once per run, right after ``distributed_info`` and before ``setup_environment``, only when a
    plugin implements it. A multi-process strategy answers it when ``distributed_info`` says this process
    was not ``launched`` but the run asks for several processes (``Trainer(devices=N)``): it starts them
    (they re-run the program, find themselves ``launched`` and run the loop), waits, and answers their exit
    status. Core then ends this process with that status (``SystemExit``) without running the loop or any
    other hook: the started processes did the work. A strategy that starts its processes from inside the
    script and brings their results back (``strategy="ddp_spawn"``) answers an ``ember.core.loop.state.Launched``
    instead, once it has put rank 0's results (weights, metrics, checkpoint paths) into this process's trainer and
    module: the entry point then returns its ``result`` without running the loop or any other hook. A failure in
    a started process is raised from here, as an exception naming the rank and the original error
    (``on_exception`` then runs as for any error).

    :ranks: every process, before any process group exists
    :wrap: yes
    :param trainer: the trainer.
    :param fn: the entry point being run: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :returns: the job's exit status, a ``Launched`` (the job ran elsewhere and its results are here), or None
        to run the loop in this process. Stops at first non-None result.
    """


@hookspec
def setup_environment(trainer: TrainerLike) -> None:
    """Bring up what the strategy needs (e.g. the process group). Called once per run, before
    ``prepare_data``, on every rank.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    """


@hookspec(firstresult=True)
def model_sharded_context(trainer: TrainerLike) -> AbstractContextManager | None:
    """Answer a context manager that ``configure_model`` runs inside (e.g. to build on the meta device).

    Called once per run.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: a context manager, or None for none. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def setup_module(trainer: TrainerLike, module: torch.nn.Module) -> Any:
    """Wrap the module for the strategy (e.g. in ``DistributedDataParallel``).

    Called once per ``fit``, after ``convert_module`` and ``configure_optimizers``. The answer is passed to
    ``step`` as ``model``. A model other than the module itself is the strategy's training-step runner: the
    fallback ``step`` calls ``model(batch, batch_idx)`` for the training stage, so its ``forward`` must run
    the module's ``training_step`` (as ``DistributedDataParallel`` around a small forwarding module does).
    No plugin rewrites the module's methods.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param module: the module on its device.
    :returns: the wrapped model, or None to use the module as is. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def process_dataloader(trainer: TrainerLike, dataloader: Any, stage: str) -> Any:
    """Adapt a data loader to the strategy (e.g. add a ``DistributedSampler``).

    Called once per loader and run, before the first batch is drawn from it.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param dataloader: the loader.
    :param stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``.
    :returns: the loader to use, or None to keep it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def reduce(trainer: TrainerLike, tensor: torch.Tensor, op: str) -> torch.Tensor:
    """Reduce a tensor over all processes (``op``: ``"mean"``, ``"sum"``, ``"max"``, ``"min"``).

    Called when a plugin or ``self.log(..., sync_dist=True)`` asks; on every rank (a collective). The
    fallback returns the tensor unchanged.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param tensor: the local tensor.
    :param op: the reduction.
    :returns: the reduced tensor. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def all_gather(trainer: TrainerLike, tensor: torch.Tensor, sync_grads: bool) -> torch.Tensor:
    """Gather a tensor from all processes, stacked on a new first dimension of size ``world_size``.

    A collective: call it on every rank. The fallback adds the leading dimension of size 1.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param tensor: the local tensor.
    :param sync_grads: whether gradients flow back through the gather.
    :returns: the gathered tensor. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def broadcast(trainer: TrainerLike, obj: Any, src: int) -> Any:
    """Send a picklable object from rank ``src`` to all ranks. A collective.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param obj: the object (ignored on ranks other than ``src``).
    :param src: the sending rank.
    :returns: the object as sent by ``src``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def barrier(trainer: TrainerLike, name: str | None) -> Any:
    """Wait until every process reaches this point. A collective.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param name: an optional name for error messages.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def reduce_boolean_decision(trainer: TrainerLike, decision: bool, all: bool) -> bool | None:
    """Agree on a decision across processes: every rank's (``all=True``) or any rank's (``all=False``).

    A collective; used for ``should_stop`` and by monitoring callbacks.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param decision: this rank's decision.
    :param all: require all ranks (True) or any rank (False).
    :returns: the agreed decision. Stops at first non-None result.
    """
