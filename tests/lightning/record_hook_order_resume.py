"""Records the hooks of a resumed fit and of ``load_from_checkpoint`` on Lightning, for
tests/test_lightning_compat_hookorder.py: the order in which a resume restores (the module's ``on_load_checkpoint``,
the weights, the callbacks' ``on_load_checkpoint`` and ``load_state_dict``, ``configure_optimizers``, the optimizer
states) and what each hook sees then; a module that renames its weights in ``on_load_checkpoint``; and a fit
resumed from the checkpoint of a fit that ``max_steps`` ended in the middle of an epoch.

The scenarios take the framework's ``pytorch`` module, so that the test runs the very same code on
``ember.lightning.pytorch``. Run in an environment with Lightning installed (not a dependency of ember):
    python tests/lightning/record_hook_order_resume.py tests/lightning/hook_order_resume.json
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch


def scenarios(pl: Any) -> dict[str, Any]:
    from torch.utils.data import DataLoader, TensorDataset

    def data(n: int = 8) -> DataLoader:
        return DataLoader(TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1)), batch_size=1)

    def trainer(root: str, callbacks: list[Any] | None = None, **kwargs: Any) -> Any:
        return pl.Trainer(accelerator="cpu", default_root_dir=root, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                          callbacks=callbacks or [], **kwargs)

    class Model(pl.LightningModule):
        """A linear layer that starts at zero (so a hook can tell whether the saved weights are in)."""

        def __init__(self, events: list[Any] | None = None) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            torch.nn.init.zeros_(self.layer.weight)
            torch.nn.init.zeros_(self.layer.bias)
            self.events = [] if events is None else events

        def loaded(self) -> bool:
            return bool(self.layer.weight.detach().abs().sum() > 0)

        def optimizer_state(self) -> Any:
            optimizers = self.trainer.optimizers
            return None if not optimizers else len(optimizers[0].state) > 0

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return (self.layer(batch[0]) - 1).pow(2).mean()

        def configure_model(self) -> None:
            self.events.append(["configure_model"])

        def configure_optimizers(self) -> Any:
            self.events.append(["configure_optimizers", self.loaded()])
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def on_load_checkpoint(self, checkpoint: dict) -> None:
            self.events.append(["on_load_checkpoint", self.loaded(), self.trainer.global_step, self.optimizer_state()])

        def zero_grad(self, set_to_none: bool = True) -> None:  # the trainer's, after on_fit_start
            self.events.append(["zero_grad"])
            super().zero_grad(set_to_none)

        def on_fit_start(self) -> None:
            # (not the optimizer state: ember restores it before on_fit_start, Lightning after; docs/lightning.md)
            self.events.append(["on_fit_start", self.loaded()])

    class Stateful(pl.Callback):
        def __init__(self, events: list[Any]) -> None:
            self.events = events

        def state_dict(self) -> dict[str, Any]:
            return {"calls": 1}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.events.append(["Callback.load_state_dict", state_dict])

        def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
            self.events.append(["Callback.on_load_checkpoint", pl_module.loaded(), trainer.global_step])

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.events.append(["Callback.on_fit_start"])

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as root:
        # 1. the order of a resume, and what each hook sees
        first = trainer(root + "/a", [Stateful([])], max_epochs=1)
        first.fit(Model(), data())
        path = first.checkpoint_callback.best_model_path
        events: list[Any] = []
        trainer(root + "/a", [Stateful(events)], max_epochs=2).fit(Model(events), data(), ckpt_path=path)
        out["resume order"] = events

        # 2. weights renamed by the module's on_load_checkpoint: a resumed fit and load_from_checkpoint
        class Renamed(Model):
            def __init__(self, events: list[Any] | None = None) -> None:
                super().__init__(events)
                self.head = self.layer
                del self.layer

            def loaded(self) -> bool:
                return bool(self.head.weight.detach().abs().sum() > 0)

            def training_step(self, batch: Any, batch_idx: int) -> Any:
                return (self.head(batch[0]) - 1).pow(2).mean()

            def on_load_checkpoint(self, checkpoint: dict) -> None:
                state = checkpoint["state_dict"]
                for key in [k for k in state if k.startswith("layer.")]:
                    state["head." + key[len("layer."):]] = state.pop(key)

        saved = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]["layer.weight"]
        events = []
        trainer(root + "/b", max_epochs=2).fit(Renamed(events), data(), ckpt_path=path)
        loaded = Renamed.load_from_checkpoint(path)
        out["renamed weights"] = {"resumed fit": [e for e in events if e[0] == "on_fit_start"],
                                  "load_from_checkpoint": torch.equal(loaded.head.weight.detach(), saved)}

        # 3. a fit that max_steps ended after the first batch of an epoch, resumed with more steps, or more epochs
        trainer(root + "/c", max_steps=1).fit(Model(), data(4))
        path = str(next(Path(root, "c").rglob("*.ckpt")))

        class Watched(Model):
            def __init__(self, run: list[Any]) -> None:
                super().__init__()
                self.run = run

            def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
                # (not on_train_epoch_start: ember calls it again when a fit resumes inside an epoch,
                # docs/checkpoints.md "What runs again"; Lightning does not)
                self.run.append(["batch", self.current_epoch, batch_idx, self.global_step])

            def on_train_epoch_end(self) -> None:
                self.run.append(["epoch end", self.current_epoch, self.global_step])

            def zero_grad(self, set_to_none: bool = True) -> None:
                self.run.append(["zero_grad"])
                super().zero_grad(set_to_none)

        for name, limits in (("max_steps", {"max_steps": 3}), ("max_epochs", {"max_epochs": 2})):
            run: list[Any] = []
            t = trainer(root + "/c" + name, **limits)
            t.fit(Watched(run), data(4), ckpt_path=path)
            run.append(["fit end", t.current_epoch, t.global_step])
            out[f"resume after max_steps, {name}"] = run
    return out


if __name__ == "__main__":
    from recorded import record_on_lightning  # (run as a script, this folder is on the path)

    record_on_lightning(scenarios, sys.argv[1])
