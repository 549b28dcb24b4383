"""The job of tests/test_launch.py and tests/test_multinode.py, started by two launchers (`torchrun` or
`ember run`, `--nnodes 2`) on one machine, or by hand.

Nothing in it names a strategy or a device count: ember finds the launcher's environment and picks DDP. Each
process records its ranks, the plugins picked and the variables its launcher set.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset

#: The variables torchrun (and ember's launcher, which runs torch's elastic agent) set for each process.
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")


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
            "world_size": trainer.world_size, "roles": trainer.role_identities,
            "env": {k: v for k, v in os.environ.items() if k in LAUNCHER_VARS or k.startswith("TORCHELASTIC_")}}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(info, f)
    if trainer.is_global_zero:
        torch.save(model.state_dict(), os.path.join(out, "weights.pt"))
