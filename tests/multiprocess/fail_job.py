"""The failing job of tests/test_failure.py: rank 1 raises at step 3.

``python fail_job.py OUT MODE``; MODE ``collective``: rank 0 goes on into the gradient all-reduce and finds
its peer gone; MODE ``hang``: rank 0 ignores SIGTERM and sleeps in its step 3, so only the launcher's SIGKILL
ends it. Each rank writes its pid to ``OUT/pid<r>``; rank 1 writes the time it raised to ``OUT/raised``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset


class FailsAtStep3(TinyClassifier):
    def __init__(self, out: str, mode: str) -> None:
        super().__init__()
        self.out, self.mode = out, mode

    def on_train_start(self) -> None:
        with open(os.path.join(self.out, f"pid{self.global_rank}"), "w") as f:
            f.write(str(os.getpid()))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 3:
            if self.global_rank == 1:
                with open(os.path.join(self.out, "raised"), "w") as f:
                    f.write(repr(time.time()))
                raise ValueError("rank 1 fails at step 3")
            if self.mode == "hang":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                time.sleep(600)
        return super().training_step(batch, batch_idx)


if __name__ == "__main__":
    out, mode = sys.argv[1], sys.argv[2]
    devices = "auto" if mode == "hang" else 2  # "hang" runs under `ember run`, which started the processes
    trainer = ember.Trainer(accelerator="cpu", strategy="ddp", devices=devices, max_epochs=100, num_sanity_val_steps=0)
    trainer.fit(FailsAtStep3(out, mode), DataLoader(tiny_dataset(64), batch_size=4))
