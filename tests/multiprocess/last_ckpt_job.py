"""A 2-process fit that keeps its checkpoints in a given folder, to follow runs of different strategies there:
``python last_ckpt_job.py OUT STRATEGY MAX_EPOCHS [CKPT_PATH]``. Checkpoints go to ``OUT/checkpoints``; each rank
writes the step it started from and the step it ended at to ``OUT/<strategy>-rank<r>.json``."""

from __future__ import annotations

import json
import os
import sys

import ember
from ember.plugins.callbacks.model_checkpoint import ModelCheckpoint
from ember.testing import TinyClassifier, tiny_loaders


class StartStep:
    def __init__(self) -> None:
        self.step = -1

    def on_train_start(self, trainer: ember.Trainer) -> None:
        self.step = trainer.global_step


if __name__ == "__main__":
    out, strategy, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt_path = sys.argv[4] if len(sys.argv) > 4 else None
    train, val = tiny_loaders(n=64)
    start = StartStep()
    trainer = ember.Trainer(accelerator="cpu", strategy=strategy, devices=2, max_epochs=epochs,
                            enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[start, ModelCheckpoint(dirpath=os.path.join(out, "checkpoints"))])
    trainer.fit(TinyClassifier(), train, val, ckpt_path=ckpt_path)
    with open(os.path.join(out, f"{strategy}-rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"start": start.step, "end": trainer.global_step}, f)
