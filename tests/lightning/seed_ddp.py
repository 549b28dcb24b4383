"""A recording subclass of ``DDPStrategy(find_unused_parameters=True)`` (``reduce``, ``barrier``) in a fit on 2
gloo CPU processes (``Trainer(accelerator="cpu", devices=2)``, which re-runs this script for rank 1).

``python seed_ddp.py PACKAGE OUT`` runs it with ``lightning.pytorch``'s or ``ember.lightning.pytorch``'s names;
each rank writes ``OUT/rank<r>.json`` (its calls, step, synced loss; rank 0 the weights too).
tests/lightning/record_seed_ddp.py records it on Lightning, tests/test_lightning_seed.py runs it on ember.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from typing import Any


def main(package: str, out: str) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    pl = importlib.import_module(package)
    strategies = importlib.import_module(f"{package}.strategies")
    calls: list = []

    class Recording(strategies.DDPStrategy):  # type: ignore[misc, name-defined]
        def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
            out = super().reduce(tensor, group, reduce_op)
            calls.append(["reduce", str(reduce_op), round(float(out), 5)])
            return out

        def barrier(self, name: Any = None) -> None:
            calls.append(["barrier"])
            super().barrier(name)

    class Model(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.unused = torch.nn.Linear(4, 1)  # no gradient: DDP needs find_unused_parameters=True

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    pl.seed_everything(0)  # the DistributedSampler's seed too: both shuffle the training data with it
    model = Model()
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=Recording(find_unused_parameters=True), max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, data)
    result = {"rank": trainer.global_rank, "world_size": trainer.world_size, "global_step": trainer.global_step,
              "loss": round(float(trainer.callback_metrics["loss"]), 5), "calls": calls}
    if trainer.global_rank == 0:
        result["weights"] = {k: v.tolist() for k, v in model.state_dict().items()}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(result, f)


def record(package: str, python: str, env: dict[str, str], timeout: float = 240) -> list[dict]:
    """Both ranks' results of the 2-process fit run with ``package``'s names under ``python``."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([python, os.path.abspath(__file__), package, out], cwd=out, env=env,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"seed_ddp.py {package} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        results = []
        for rank in range(2):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                results.append(json.load(f))
        return results


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
