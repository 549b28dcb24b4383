"""The fault-tolerant job of tests/test_restarts.py, started by ``ember run --nproc-per-node 2 --max-restarts N``.

``python restart_job.py OUT KILLS``: a 2-rank DDP fit on gloo (shuffled data, per-rank dropout) of 2 epochs, 12
optimizer steps, saving every 2 steps. ``KILLS`` is a comma-separated list of global steps (may be empty): in
attempt ``i`` of the job (``TORCHELASTIC_RESTART_COUNT``), rank 1 SIGKILLs itself right after step
``KILLS[i]``, having written ``OUT/kill-<i>.json`` (the time and the step). Each attempt's rank 0 writes
``OUT/start-<i>.json`` when it begins its first training batch (the time and the global step it starts from);
the last one writes the final weights to ``OUT/weights.pt``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

STARTED = time.time()  # before torch is imported: how long a restarted process takes to come up

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import ember  # noqa: E402
from ember.testing import tiny_dataset  # noqa: E402

OUT = sys.argv[1]
KILLS = [int(k) for k in sys.argv[2].split(",") if k] if len(sys.argv) > 2 else []
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


class Dropout(ember.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 3)
        self.drop = torch.nn.Dropout(0.3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(self.drop(torch.relu(self.inp(x)))), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class Faults:
    def __init__(self) -> None:
        self.started = False

    def on_train_start(self, trainer: Any) -> None:
        if trainer.global_step == 0:  # a fresh start: give each rank its own random stream
            torch.manual_seed(1000 + trainer.global_rank)

    def on_train_batch_start(self, trainer: Any) -> None:
        if not self.started and trainer.is_global_zero:
            self.started = True
            with open(os.path.join(OUT, f"start-{ATTEMPT}.json"), "w") as f:
                json.dump({"time": time.time(), "global_step": trainer.global_step, "process_started": STARTED}, f)

    def on_train_batch_end(self, trainer: Any) -> None:
        if trainer.global_rank == 1 and ATTEMPT < len(KILLS) and trainer.global_step == KILLS[ATTEMPT]:
            with open(os.path.join(OUT, f"kill-{ATTEMPT}.json"), "w") as f:
                json.dump({"time": time.time(), "global_step": trainer.global_step}, f)
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    ember.seed_everything(0)
    loader = DataLoader(tiny_dataset(48), batch_size=8, shuffle=True)  # 3 batches per rank and epoch
    trainer = ember.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=4, default_root_dir=OUT,
                            restart_save_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, callbacks=[Faults()])
    model = Dropout()
    trainer.fit(model, loader)
    if trainer.is_global_zero:
        torch.save(model.state_dict(), os.path.join(OUT, "weights.pt"))


if __name__ == "__main__":
    main()
