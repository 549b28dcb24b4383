"""Per-epoch costs on the short-epoch workload (32 training and 8 validation steps per epoch), one row per
piece of per-epoch work, so that the difference between two rows is what that piece costs per epoch:

* ``ember, validation only``: everything off but validating every epoch (the validation loop's set-up);
* ``+defaults, no checkpoint``: the defaults (logging, progress bar, epoch-end logging) without checkpointing;
* ``+defaults, synchronous checkpoint``: a checkpoint every epoch written on the training thread;
* ``+defaults``: the defaults, checkpoints written in the background.
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


def epoch_group(clock: harness.Clock, repeats: int, epochs: int = 16, progress: Any = None) -> harness.Group:
    w = workloads.short_epochs(epochs)

    def ember(defaults: bool, **kwargs: Any) -> harness.Run:
        return lambda: frameworks.ember_run(w, clock, defaults=defaults, **kwargs)

    rows = [("ember, validation only", ember(False)),
            ("ember+defaults, no checkpoint", ember(True, enable_checkpointing=False))]
    sync = _sync_storage()
    if sync is not None:
        rows.append(("ember+defaults, synchronous checkpoint", ember(True, checkpoint_io=sync)))
    rows.append(("ember+defaults", ember(True)))
    g = harness.interleave(frameworks.build("raw", w, clock), rows, w.steps(), repeats, progress=progress)
    return harness.Group(f"per-epoch costs: {w.title}", g.baseline, g.samples,
                         steps_per_epoch=workloads.SHORT_TRAIN)
