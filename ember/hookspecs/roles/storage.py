"""Role hooks: checkpoint storage; loggers. See :mod:`ember.hookspecs.roles`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from ember.hookspecs.trainer import TrainerLike


# ---------------------------------------------------------------------------------------------------------
# Checkpoint storage
# ---------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def save_checkpoint(trainer: TrainerLike, checkpoint: dict, path: str) -> Any:
    """Write a checkpoint dict to ``path`` atomically (never leaving a partial file at ``path``).

    Called once per save, on the ranks the strategy says write (rank 0 for single-file checkpoints). While a
    fit trains it runs on the checkpoint writer thread (see docs/checkpoints.md, "Background writes"), with a
    copy of the checkpoint taken at the safe point. A storage that offers ``serialize_checkpoint(checkpoint)
    -> memoryview | None`` gets, while a single process trains on the CPU and it alone implements this hook,
    the bytes that method returned at the safe point instead; a plugin that offers
    ``stage_checkpoint(trainer, checkpoint) -> dict`` gets what that method returned.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param checkpoint: the checkpoint (or, see above, its serialised bytes or staged copy).
    :param path: the destination.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def load_checkpoint(trainer: TrainerLike | None, path: str, weights_only: bool) -> dict:
    """Read a checkpoint dict from ``path``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer, or None when loading outside a run (``Module.load_from_checkpoint``).
    :param path: the file.
    :param weights_only: refuse anything but tensors and plain containers (the default).
    :returns: the checkpoint dict. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def remove_checkpoint(trainer: TrainerLike, path: str) -> Any:
    """Delete a checkpoint written by ``save_checkpoint``.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :param path: the file.
    :returns: any non-None value to mark the hook answered. Stops at first non-None result.
    """


@hookspec
def last_checkpoint_path(trainer: TrainerLike) -> str | None:
    """Answer the path of the "last" checkpoint a plugin keeps (``last.ckpt`` of a checkpoint callback).

    Called on every rank when ``fit``/``validate``/``test``/``predict`` resolve ``ckpt_path="last"`` (after
    ``setup``; the newest existing answer is read; when none exists, core looks in the earlier runs of the same
    run name), whenever requested checkpoints are written (the answered files are written after the others), and
    when a fit stops on a signal (the checkpoint is written to every answered path). Every implementation
    answers; with no answer, core uses ``last.ckpt`` in the first checkpoint callback's folder, else
    ``<run folder>/checkpoints/last.ckpt`` (``<default_root_dir>/checkpoints`` without a logger).

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: a path, which need not exist yet, or None.
    """


@hookspec
def exception_checkpoint_path(trainer: TrainerLike) -> str | None:
    """Answer the path of the checkpoint a plugin writes when a fit fails (``OnExceptionCheckpoint``'s file).

    Called on every rank when ``fit``/``validate``/``test``/``predict`` resolve ``ckpt_path="last"`` and no
    "last" checkpoint exists, neither this run's (:func:`last_checkpoint_path`) nor one of an earlier run of the
    same run name: the newest existing answer is read then, so that a fit that failed before it kept a "last"
    checkpoint continues from the file written at the failure. Where a "last" checkpoint exists it comes first:
    it was written at a safe point, from which a fit resumes exactly. Also called once at the start of every
    ``fit`` given no ``ckpt_path`` (after ``setup``): when an answered file exists, a failed fit left it, and the
    fit resumes as ``ckpt_path="last"`` does, with a warning (so a plugin answers with a file it removes after a
    fit that ends normally). Never called to write a file.

    :ranks: every rank
    :wrap: yes
    :param trainer: the trainer.
    :returns: a path, which need not exist, or None.
    """


@hookspec(firstresult=True)
def requeue(trainer: TrainerLike, signum: int, checkpoint_path: str | None, requested: bool) -> Any:
    """Ask the cluster to run this job again after it stops on a signal (e.g. ``scontrol requeue``).

    Called once, on every rank, after a fit wrote its checkpoint at the safe point following a signal and
    before it raises (``KeyboardInterrupt`` after Ctrl-C, ``ember.core.loop.signals.SignalExit`` otherwise).
    Answered by a cluster-environment plugin; nothing happens when none answers. ``requested`` is True when whoever asked for the stop (through
    ``ember.core.loop.signals.request_stop(..., requeue=True)``) wants a requeue; an environment may also decide
    from ``signum`` alone.

    :ranks: every rank
    :wrap: yes
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
def log_metrics(trainer: TrainerLike, metrics: dict, step: int) -> None:
    """Record metrics (broadcast to every logger plugin: several loggers may be active at once).

    Called on global rank 0: every ``log_every_n_steps`` optimizer steps with the step values logged during
    that step, and after each training epoch and each validation/test run with the epoch values; ``metrics``
    also holds ``epoch``. Values are Python floats, read off the device in one transfer only because a
    logger implements this hook: with no logger, the loop reads nothing. A Trainer taken through Lightning's
    names writes on Lightning's step axis instead (see :mod:`ember.core.loop.metrics`): ``step`` counts the
    batches that stepped before, and an evaluation's per-step values are written after each of its batches,
    without ``epoch``.

    :ranks: global rank 0 only
    :wrap: yes
    :param trainer: the trainer.
    :param metrics: name to float.
    :param step: the ``global_step`` the values belong to.
    """


@hookspec
def log_hyperparams(trainer: TrainerLike, params: dict, saved: bool) -> None:
    """Record the run's hyperparameters: the module's ``hparams`` merged with the DataModule's.

    Called once per ``fit``, ``validate``, ``test`` and ``predict``, on global rank 0: in a fit after
    ``configure_optimizers`` and before ``on_fit_start``, otherwise before the stage's first hook.

    :ranks: global rank 0 only
    :wrap: yes
    :param trainer: the trainer.
    :param params: name to value.
    :param saved: whether the module or the DataModule saved hyperparameters for the loggers
        (``save_hyperparameters()``, not ``logger=False``); where neither did, Lightning's loggers are not given
        any, and a logger that records only hyperparameters has nothing to do.
    """
