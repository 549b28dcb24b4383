"""A long two-process DDP fit on gloo: ``python slow_ddp_job.py OUT [STUCK_RANK] [OPTIONS_JSON]``.

Each rank writes its pid to ``OUT/pid<r>`` once training is under way and takes a little while per step.
With STUCK_RANK, that rank sleeps (a hang) in its training step at global step 3. OPTIONS_JSON holds extra
Trainer arguments (and ``collective_timeout``, seconds, for ``DDPStrategy(timeout=...)``). Used by tests/test_reliability_orphans.py and tests/test_reliability_watchdog.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset


class Slow(TinyClassifier):
    def __init__(self, out: str, stuck_rank: int) -> None:
        super().__init__()
        self.out, self.stuck_rank = out, stuck_rank

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 1:
            path = os.path.join(self.out, f"pid{self.global_rank}")
            if not os.path.exists(path):
                with open(path + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(path + ".tmp", path)
        if self.trainer.global_step == 3 and self.global_rank == self.stuck_rank:
            with open(os.path.join(self.out, "stuck"), "w") as f:
                f.write(repr(time.time()))
            time.sleep(600)
        time.sleep(0.05)
        return super().training_step(batch, batch_idx)


if __name__ == "__main__":
    out = sys.argv[1]
    stuck = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    if "collective_timeout" in options:  # seconds: the process group's timeout (DDPStrategy(timeout=...))
        from ember.plugins.strategies.ddp import DDPStrategy

        options["strategy"] = DDPStrategy(timeout=options.pop("collective_timeout"))
    settings = {"strategy": "ddp", "accelerator": "cpu", "max_epochs": 1000, "num_sanity_val_steps": 0,
                "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
                "enable_checkpointing": False, **options}
    trainer = ember.Trainer(**settings)
    trainer.fit(Slow(out, stuck), DataLoader(tiny_dataset(64), batch_size=4))
