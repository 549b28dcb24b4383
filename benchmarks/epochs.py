"""Per-epoch costs on the short-epoch workload (32 training and 8 validation steps per epoch): the defaults, then
each default switched off in turn, so that the difference between a row and ``ember+defaults`` is what that
default costs per epoch (the ``overhead ms/epoch`` column), without a profiler:

* ``ember+defaults``: progress bar, CSV logger, the loss logged every step, a checkpoint every epoch written by
  the writer thread;
* ``ember+defaults, writer process``: the same, checkpoints written by a writer process
  (``TorchCheckpointIO(writer="process")``);
* ``ember+defaults, synchronous checkpoint``: the checkpoint written on the training thread;
* ``ember+defaults, no file work``: the checkpoint built and serialised at the safe point and handed to the writer
  thread as with the defaults, which then writes, links and removes nothing: its difference to ``ember+defaults`` is
  what the writer thread's file work (writes, ``fsync``, renames, removals) costs the training thread, which it
  does not run;
* ``ember+defaults, checkpointing off`` / ``logger off`` / ``progress bar off``: one default off;
* ``ember+defaults, all three off``: checkpointing, logger and progress bar off;
* ``ember, validation only``: everything off but validating every epoch (the validation loop's set-up).

Next to the times, :func:`calls_per_epoch` counts the Python calls each row makes per epoch on the training
thread, which a busy machine does not move (only the progress bar's redraws, on a timer, move the rows with the
progress bar, by about a hundred calls): a change to per-epoch work shows there when the times cannot resolve it.
"""

from __future__ import annotations

from typing import Any

from benchmarks import frameworks, harness, workloads


def _storage(**kwargs: Any) -> Any:
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    try:
        return TorchCheckpointIO(**kwargs)
    except TypeError:  # an ember without this option
        return None


def _no_file_work() -> Any:
    """The default storage, except that its writes, links and removals do nothing (None in an ember without
    ``serialize_checkpoint``): what reaches the writer thread is the same bytes."""
    try:
        import ember
        from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO
    except ImportError:
        return None
    if not hasattr(TorchCheckpointIO, "serialize_checkpoint"):
        return None

    class NoFileWork(TorchCheckpointIO):
        def _writes_plain_files(self) -> bool:
            return True  # serialised at the safe point, as by the default storage

        @ember.hookimpl
        def save_checkpoint(self, trainer: Any, checkpoint: Any, path: str) -> bool:
            return True

        @ember.hookimpl
        def remove_checkpoint(self, trainer: Any, path: str) -> bool:
            return True

        def link_checkpoint(self, trainer: Any, source: str, path: str) -> bool:
            return True

    return NoFileWork()


def row_args() -> list[tuple[str, bool, dict[str, Any]]]:
    """The table's rows as ``(label, defaults, Trainer arguments)``: ``defaults`` as in
    :func:`benchmarks.frameworks.ember_run`, the arguments switching one default off (or choosing a writer)."""
    args: list[tuple[str, bool, dict[str, Any]]] = [("ember+defaults", True, {})]
    for label, storage in (("writer process", _storage(writer="process")),
                           ("synchronous checkpoint", _storage(async_save=False)),
                           ("no file work", _no_file_work())):
        if storage is not None:
            args.append((f"ember+defaults, {label}", True, {"checkpoint_io": storage}))
    args += [("ember+defaults, checkpointing off", True, {"enable_checkpointing": False}),
             ("ember+defaults, logger off", True, {"logger": False}),
             ("ember+defaults, progress bar off", True, {"enable_progress_bar": False}),
             ("ember+defaults, all three off", True, {"enable_checkpointing": False, "logger": False,
                                                      "enable_progress_bar": False}),
             ("ember, validation only", False, {})]
    return args


def rows(w: workloads.Workload, clock: harness.Clock, **run_args: Any) -> list[tuple[str, harness.Run]]:
    """The rows of the table for workload ``w``; ``run_args`` go to every run (``device=``, ``precision=``)."""
    def ember(defaults: bool, kwargs: dict[str, Any]) -> harness.Run:
        return lambda: frameworks.ember_run(w, clock, defaults=defaults, **run_args, **kwargs)

    return [(label, ember(defaults, kwargs)) for label, defaults, kwargs in row_args()]


def epoch_group(clock: harness.Clock, repeats: int, epochs: int = 16, progress: Any = None) -> harness.Group:
    w = workloads.short_epochs(epochs)
    g = harness.interleave(frameworks.build("raw", w, clock), rows(w, clock), w.steps(), repeats,
                           progress=progress)
    return harness.Group(f"per-epoch costs: {w.title}", g.baseline, g.samples,
                         steps_per_epoch=workloads.SHORT_TRAIN)


def calls_per_epoch(clock: harness.Clock, epochs: tuple[int, int] = (4, 12)) -> dict[str, float]:
    """Python calls per epoch of the raw loop and of each row, on the training thread (a background writer's
    calls are its own thread's): the difference between runs of ``epochs`` epochs, set-up left out."""
    def runs(n: int) -> list[tuple[str, harness.Run]]:
        w = workloads.short_epochs(n)
        return [("raw", frameworks.build("raw", w, clock)), *rows(w, clock)]

    return {label: harness.marginal_calls(few, many, epochs[1] - epochs[0])
            for (label, few), (_, many) in zip(runs(epochs[0]), runs(epochs[1]), strict=True)}


def format_calls(calls: dict[str, float]) -> str:
    raw = calls["raw"]
    return ("Python calls per epoch on the training thread (cProfile; short epochs, marginal per epoch): "
            f"raw {raw:.0f}; " + ", ".join(f"{label} +{n - raw:.0f}" for label, n in calls.items() if label != "raw"))
