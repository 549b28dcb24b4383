"""A 2-process fit with the Trainer's defaults (sanity check, checkpointing, logging, progress bar on):
``python defaults_job.py OUT STRATEGY``. Each rank writes what it saw to ``OUT/rank<r>.json``."""

from __future__ import annotations

import json
import os
import sys

import ember
from ember.testing import TinyClassifier, tiny_loaders


class Counts:
    """Validation batches run inside the sanity check."""

    def __init__(self) -> None:
        self.sanity_batches, self.in_sanity = 0, False

    def on_sanity_check_start(self) -> None:
        self.in_sanity = True

    def on_sanity_check_end(self) -> None:
        self.in_sanity = False

    def on_validation_batch_end(self) -> None:
        self.sanity_batches += self.in_sanity


if __name__ == "__main__":
    out, strategy = sys.argv[1], sys.argv[2]
    train, val = tiny_loaders(n=64)
    counts = Counts()
    trainer = ember.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_epochs=2, callbacks=[counts])
    trainer.fit(TinyClassifier(), train, val)
    info = {"global_step": trainer.global_step, "sanity_batches": counts.sanity_batches,
            "metrics": sorted(trainer.callback_metrics), "best": trainer.checkpoint_callback.best_model_path,
            "log_dir": trainer.log_dir, "dirpath": trainer.checkpoint_callback.dirpath}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(info, f)
