"""Where a short-epoch fit spends its wall time, by phase, with each default switched off in turn.

    python -m benchmarks.epoch_phases [--fits 12] [--epochs 16]

The short-epoch workload (32 training and 8 validation steps of the tiny MLP per epoch, the ``epochs`` section's)
is fitted ``--fits`` times per row, one fit of each row in turn. A callback marks the first and the last training
batch, which splits each fit into:

* ``set-up``: from ``fit()`` to the first batch (loggers and run folder, the sanity check, the model summary);
* ``epochs``: from the first batch to the last (per-epoch work: validation, the progress bar's epoch line,
  epoch-end logging, checkpoints);
* ``end``: from the last batch until ``fit()`` returns (the last validation, waiting for the last checkpoint's
  write, closing the loggers).

Each cell is the minimum and the median over the fits, in milliseconds; the minimum is the steadier on a shared
machine. Rows: the defaults (progress bar, CSV logger, the loss logged every step, a checkpoint every epoch), the
writer process instead of the writer thread, then checkpointing, the progress bar and the logger off in turn,
and all three off.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import ember
from benchmarks import frameworks, harness, workloads


class _Marks(ember.Callback):
    """The times of the first and the last training batch of a fit."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0

    def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.last = time.perf_counter()


def rows() -> dict[str, dict[str, Any]]:
    from ember.plugins.checkpoint_io.torch_file import TorchCheckpointIO

    return {"defaults": {},
            "defaults, writer process": {"checkpoint_io": TorchCheckpointIO(writer="process")},
            "checkpointing off": {"enable_checkpointing": False},
            "progress bar off": {"enable_progress_bar": False},
            "logger off": {"logger": False},
            "all three off": {"enable_checkpointing": False, "enable_progress_bar": False, "logger": False}}


def one_fit(w: workloads.Workload, extra: dict[str, Any]) -> tuple[float, float, float]:
    """(set-up, epochs, end) of one fit, in seconds."""
    marks = _Marks()
    model = frameworks.EmberTask(w, log_steps=True)
    train, val = w.make_data()
    with harness.silenced(), frameworks.scratch_dir() as root:
        trainer = ember.Trainer(**{"max_epochs": w.epochs, "accelerator": "cpu", "default_root_dir": root,
                                   "logger": "csv", "callbacks": [marks], **extra})
        start = time.perf_counter()
        trainer.fit(model, train, val)
        end = time.perf_counter()
    assert marks.first is not None
    return marks.first - start, marks.last - marks.first, end - marks.last


def measure(fits: int, epochs: int) -> dict[str, list[tuple[float, float, float]]]:
    """``fits`` fits of every row, one of each in turn, after one warm-up round."""
    w = workloads.short_epochs(epochs)
    table = rows()
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in table}
    for round_ in range(fits + 1):
        for name, extra in table.items():
            phases = one_fit(w, extra)
            if round_:
                times[name].append(phases)
    return times


def format_table(times: dict[str, list[tuple[float, float, float]]], epochs: int) -> str:
    def cell(values: tuple[float, ...]) -> str:
        return f"{1e3 * min(values):8.1f} ({1e3 * statistics.median(values):7.1f})"

    lines = [f"short epochs, {epochs} x ({workloads.SHORT_TRAIN} train + {workloads.SHORT_VAL} val steps); "
             "ms, minimum (median) over the fits",
             f"{'row':26} {'set-up':>18} {'epochs':>18} {'end':>18}"]
    for name, phases in times.items():
        lines.append(f"{name:26} " + " ".join(f"{cell(column):>18}" for column in zip(*phases, strict=True)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.epoch_phases", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fits", type=int, default=12, help="fits per row (default 12)")
    p.add_argument("--epochs", type=int, default=16, help="epochs per fit (default 16)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(format_table(measure(args.fits, args.epochs), args.epochs))


if __name__ == "__main__":
    main()
