"""A script in one process that keeps its trainers and models to the end: ``python exit_job.py OUT STRATEGY...``.

Each strategy fits in this process (``devices=1``: a process group of one, with its backend's threads). After
ember's exit handler, the process-group threads still running are written to ``OUT/threads.json`` (read from
``/proc``; None elsewhere than Linux).
"""

from __future__ import annotations

import atexit
import json
import os
import sys

from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset


def backend_threads() -> list[str] | None:
    if not sys.platform.startswith("linux"):
        return None
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread has just ended
            continue
    return sorted(n for n in names if "gloo" in n or "nccl" in n)


def record(out: str) -> None:
    with open(os.path.join(out, "threads.json"), "w") as f:
        json.dump({"threads": backend_threads()}, f)


if __name__ == "__main__":
    out = sys.argv[1]
    atexit.register(record, out)  # before ember's exit handler is registered, so it runs after it
    KEPT = []
    for strategy in sys.argv[2:]:
        model = TinyClassifier()
        trainer = ember.Trainer(accelerator="cpu", strategy=strategy, devices=1, max_epochs=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, DataLoader(tiny_dataset(16), batch_size=4))
        KEPT.append((model, trainer))
    with open(os.path.join(out, "during.json"), "w") as f:
        json.dump({"threads": backend_threads()}, f)
