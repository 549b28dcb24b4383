"""What the training and evaluation loops read of the :class:`~ember.core.loop.loops.Loops` that owns them.

``Loops`` builds both loops and hands itself in; they annotate with :class:`LoopsLike`, so neither imports
``loops`` (which imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from ember.core.loop.metrics import MetricLog
    from ember.core.loop.results import Results
    from ember.core.loop.state import EvalCounts, LogContext, Progress

from ember.hookspecs import TrainerLike


class LoopsLike(Protocol):
    """The run state and helpers one fit's loops share."""

    t: RunningTrainer
    max_epochs: int
    max_steps: int
    progress: Progress
    log_context: LogContext
    metrics: MetricLog
    train_results: Results
    #: The training loop (``ember.core.loop.training.TrainingLoop``) and the loaders given to the running fit.
    training: Any
    fit_loaders: dict[str, Any]
    eval_loaders: dict[str, list[Any]]
    attached: dict[str, Any]
    val_results: Results
    test_results: Results

    @property
    def evaluation(self) -> Evaluation: ...

    def transfer(self, batch: Any, dataloader_idx: int) -> Any: ...

    def load_train_data(self) -> None: ...

    def load_val_data(self) -> None: ...


class Evaluation(Protocol):
    """The evaluation loop, as the training loop runs it for validation."""

    #: The batches each evaluation loop ran: ``"fit"`` (the fit's validation), ``"validate"``, ``"test"``,
    #: ``"predict"``.
    counts: dict[str, EvalCounts]

    def run(self, stage: str, loaders: list[Any], nums: list[float],
            predictions: list[list[Any]] | None = None) -> dict[str, torch.Tensor]: ...


class RunningTrainer(TrainerLike, Protocol):
    """What the loop uses of the Trainer beyond what plugins may (:class:`~ember.hookspecs.TrainerLike`)."""

    #: The checkpoint machinery (``ember.core.checkpointing.checkpoint.Checkpointing``).
    checkpointing: Any
    ckpt_path: str | None
    num_sanity_val_batches: list[float]
    #: The loops (``ember.core.loop.loops.Loops``), which own the run state.
    loop: Any
