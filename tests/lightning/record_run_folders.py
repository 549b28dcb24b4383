"""Records where Lightning puts a run's files, which checkpoint its ``ckpt_path`` values pick, and its loggers'
attributes, for tests/test_run_folders.py.

Run in an environment with Lightning and tensorboard installed (not dependencies of ember):
    python tests/lightning/record_run_folders.py > tests/lightning/run_folders.json
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ember.testing import tiny_dataset  # noqa: E402  (data only: plain torch tensors)


def main() -> None:
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 3)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def loaders():
        return DataLoader(tiny_dataset(32), batch_size=8), DataLoader(tiny_dataset(16), batch_size=8)

    def trainer(root, **kwargs):
        args = {"accelerator": "cpu", "max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False,
                "num_sanity_val_steps": 0, "default_root_dir": root, **kwargs}
        return L.Trainer(**args)

    def rel(path, root):
        return None if path is None else os.path.relpath(os.fspath(path), root)

    out: dict = {"lightning_version": L.__version__}
    with tempfile.TemporaryDirectory() as root:
        first = trainer(root)
        first.fit(Lit(), *loaders())
        run = first.log_dir
        out["default"] = {
            "logger": type(first.logger).__name__,
            "log_dir": rel(run, root),
            "checkpoint_dirpath": rel(first.checkpoint_callback.dirpath, root),
            "run_folder": sorted(n if not n.startswith("events.out") else "events.out.tfevents*"
                                 for n in os.listdir(run)),
            "checkpoints": sorted(os.listdir(os.path.join(run, "checkpoints"))),
        }
        last = os.path.join(run, "checkpoints", sorted(os.listdir(os.path.join(run, "checkpoints")))[0])

        # evaluation after a fit in the same Trainer: with the model given, and without
        model = first.lightning_module
        first.validate(model, loaders()[1], verbose=False)
        with_model = first.ckpt_path
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first.validate(dataloaders=loaders()[1], verbose=False)
        out["evaluate_after_fit"] = {
            "with_model_ckpt_path": rel(with_model, root),
            "without_model_ckpt_path": rel(first.ckpt_path, root),
            "without_model_warns_best": any("best model of the previous `fit`" in str(w.message) for w in caught),
        }

        # a new Trainer: "last" looks in its own (new) version folder; an explicit path resumes into a new version
        second = trainer(root, max_epochs=2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            second.fit(Lit(), *loaders(), ckpt_path="last")
        third = trainer(root, max_epochs=2)
        third.fit(Lit(), *loaders(), ckpt_path=last)
        out["new_trainer"] = {
            "last_ckpt_path": rel(second.ckpt_path, root),
            "last_warns_none_available": any("no last checkpoint available" in str(w.message) for w in caught),
            "last_log_dir": rel(second.log_dir, root),
            "resume_from_path_log_dir": rel(third.log_dir, root),
            "resume_from_path_checkpoint_dirpath": rel(third.checkpoint_callback.dirpath, root),
        }

        fourth = trainer(root, logger=False)
        fourth.fit(Lit(), *loaders())
        out["no_logger"] = {"checkpoint_dirpath": rel(fourth.checkpoint_callback.dirpath, root),
                            "log_dir": rel(fourth.log_dir, root)}

        loggers = {}
        for kind in (CSVLogger, TensorBoardLogger):
            logger = kind(save_dir=root, name="exp")
            trainer(root, logger=logger).fit(Lit(), *loaders())
            loggers[kind.__name__] = {
                "name": logger.name, "version": logger.version, "save_dir": rel(logger.save_dir, root),
                "log_dir": rel(logger.log_dir, root), "experiment": type(logger.experiment).__name__,
                "experiment_has": sorted(a for a in ("log_metrics", "log_hparams", "save", "metrics_file_path",
                                                     "add_scalar", "flush") if hasattr(logger.experiment, a)),
                "finalize_params": {p.name: p.default for p in
                                    inspect.signature(logger.finalize).parameters.values()
                                    if p.default is not inspect.Parameter.empty},
                "methods": sorted(m for m in ("log_hyperparams", "log_metrics", "save", "finalize")
                                  if callable(getattr(logger, m, None))),
            }
        out["loggers"] = loggers
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
