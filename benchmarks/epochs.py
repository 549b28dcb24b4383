"""Per-epoch costs on the short-epoch workload (32 training and 8 validation steps per epoch), one row per
piece of per-epoch work, so that the difference between two rows is what that piece costs per epoch:

* ``ember, validation only``: everything off but validating every epoch (the validation loop's set-up);
* ``+defaults, no checkpoint``: the defaults (logging, progress bar, epoch-end logging) without checkpointing;
* ``+defaults, synchronous checkpoint``: a checkpoint every epoch written on the training thread;
* ``+defaults``: the defaults, checkpoints written in the background.

Next to the times, :func:`calls_per_epoch` counts the Python calls each row makes per epoch on the training
thread, which a busy machine does not move (only the progress bar's redraws, on a timer, move the rows with the
defaults, by about a hundred calls): a change to per-epoch work shows there when the times cannot resolve it.
"""

from __future__ import annotations

from typing import Any

from benchmarks import frameworks, harness, workloads


def _sync_storage() -> Any:
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    try:
        return TorchCheckpointIO(async_save=False)  # type: ignore[call-arg]
    except TypeError:  # an ember without background checkpoint writes: every write is synchronous
        return None


def _rows(w: workloads.Workload, clock: harness.Clock) -> list[tuple[str, harness.Run]]:
    def ember(defaults: bool, **kwargs: Any) -> harness.Run:
        return lambda: frameworks.ember_run(w, clock, defaults=defaults, **kwargs)

    rows = [("ember, validation only", ember(False)),
            ("ember+defaults, no checkpoint", ember(True, enable_checkpointing=False))]
    sync = _sync_storage()
    if sync is not None:
        rows.append(("ember+defaults, synchronous checkpoint", ember(True, checkpoint_io=sync)))
    rows.append(("ember+defaults", ember(True)))
    return rows


def epoch_group(clock: harness.Clock, repeats: int, epochs: int = 16, progress: Any = None) -> harness.Group:
    w = workloads.short_epochs(epochs)
    g = harness.interleave(frameworks.build("raw", w, clock), _rows(w, clock), w.steps(), repeats,
                           progress=progress)
    return harness.Group(f"per-epoch costs: {w.title}", g.baseline, g.samples,
                         steps_per_epoch=workloads.SHORT_TRAIN)


def calls_per_epoch(clock: harness.Clock, epochs: tuple[int, int] = (4, 12)) -> dict[str, float]:
    """Python calls per epoch of the raw loop and of each row, on the training thread (a background writer's
    calls are its own thread's): the difference between runs of ``epochs`` epochs, set-up left out."""
    def runs(n: int) -> list[tuple[str, harness.Run]]:
        w = workloads.short_epochs(n)
        return [("raw", frameworks.build("raw", w, clock)), *_rows(w, clock)]

    return {label: harness.marginal_calls(few, many, epochs[1] - epochs[0])
            for (label, few), (_, many) in zip(runs(epochs[0]), runs(epochs[1]), strict=True)}


def format_calls(calls: dict[str, float]) -> str:
    raw = calls["raw"]
    return ("Python calls per epoch on the training thread (cProfile; short epochs, marginal per epoch): "
            f"raw {raw:.0f}; " + ", ".join(f"{label} +{n - raw:.0f}" for label, n in calls.items() if label != "raw"))
