"""The smallest multi-process job that ends like a user's script: ``ember run --nproc-per-node 2 exit_status_job.py``.

A 2-process validation on gloo whose logged loss is averaged over the processes (an all-reduce of the last
batches, as a training step's gradients are); the model and the trainer stay referenced until the interpreter
exits, as in a script that ends after ``validate``. The process must end with status 0 (an abort at interpreter
exit is what tests/test_process_group_exit.py's 20-run test looks for). No optimizer is made: torch's first
optimizer imports its compiler's modules, which would triple each process's start-up cost and test nothing here.
"""

from typing import Any

import torch
from torch.utils.data import DataLoader

import ember
from ember.testing import TinyClassifier, tiny_dataset


class Synced(TinyClassifier):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y), sync_dist=True)


model = Synced()
trainer = ember.Trainer(accelerator="cpu", strategy="ddp", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
metrics = trainer.validate(model, DataLoader(tiny_dataset(16), batch_size=4))
assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == 2, "not a 2-process job"
assert "val_loss" in metrics[0], metrics
