"""Records the batch sizes Lightning's batch-size finder tries, for tests/test_tuner.py.

A model that fails like the CPU allocator above ``capacity`` samples per batch; run in an environment with
Lightning installed (not a dependency of ember):
    python tests/lightning/record_batch_size.py > tests/lightning/batch_size.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ember.testing import tiny_dataset  # noqa: E402  (data only: plain torch tensors)

CASES = [{"mode": "power", "capacity": 40}, {"mode": "binsearch", "capacity": 40},
         {"mode": "power", "capacity": 10**9}, {"mode": "binsearch", "capacity": 100}]


def main() -> None:
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    class Lit(L.LightningModule):
        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 3)
            self.batch_size = 2
            self.capacity = capacity
            self.tried: list[int] = []

        def train_dataloader(self):
            return DataLoader(tiny_dataset(256), batch_size=self.batch_size, shuffle=True)

        def training_step(self, batch, batch_idx):
            n = len(batch[0])
            if batch_idx == 0:
                self.tried.append(n)
            if n > self.capacity:
                raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory for batch {n}")
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    warnings.filterwarnings("ignore")
    out = []
    for case in CASES:
        model = Lit(case["capacity"])
        trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, max_epochs=1)
        found = Tuner(trainer).scale_batch_size(model, mode=case["mode"], steps_per_trial=1, init_val=2)
        out.append({**case, "found": found, "tried": model.tried})
    json.dump({"lightning": L.__version__, "cases": out}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
