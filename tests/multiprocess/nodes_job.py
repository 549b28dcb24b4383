"""The job of tests/test_nodes.py, started by two `torchrun --nnodes 2 --nproc-per-node 1` on one machine.

Nothing in it names a strategy or a device count: ember finds the torchrun environment and picks DDP.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset


def fit(batch_size: int, **trainer_args: object) -> tuple[TinyClassifier, ember.Trainer]:
    ember.seed_everything(0)
    model = TinyClassifier()
    trainer = ember.Trainer(**{"accelerator": "cpu", "max_epochs": 2, "num_sanity_val_steps": 0, **trainer_args})
    trainer.fit(model, DataLoader(tiny_dataset(64), batch_size=batch_size))
    return model, trainer


if __name__ == "__main__":
    out = sys.argv[1]
    model, trainer = fit(4)
    info = {"global_rank": trainer.global_rank, "node_rank": trainer.node_rank, "local_rank": trainer.local_rank,
            "world_size": trainer.world_size, "roles": trainer.role_identities}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(info, f)
    if trainer.is_global_zero:
        torch.save(model.state_dict(), os.path.join(out, "weights.pt"))
