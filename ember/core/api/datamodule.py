"""``ember.DataModule``: an optional base for DataModules, with LightningDataModule's methods.

A DataModule needs no base class: any object with ``train_dataloader()`` (and the other ``*_dataloader``
methods it uses) works. This base adds ``save_hyperparameters``/``hparams`` (passed to the loggers with the
module's), ``prepare_data``, ``setup(stage)`` and ``teardown(stage)`` as no-ops to override, and
``state_dict``/``load_state_dict``, kept in full checkpoints (``checkpoint["plugins"]["datamodule"]``) and
restored when a fit resumes.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from ember.core.api.hparams import HyperparametersMixin
from ember.core.errors import ConfigurationError
from ember.core.hooks.positional import STYLE_ATTR, add_base_hooks, base_hook


class LoaderPlaceholders:
    """The four data methods, as placeholders until a class defines them (or a DataModule's ``from_datasets``): a
    placeholder counts as absent to the Trainer (:func:`ember.core.hooks.positional.defines`), and calling one
    says what is missing. The last base of :class:`DataModule` and of ``ember.Module``, so that a mixin after
    either still gives its own."""

    @base_hook
    def train_dataloader(self) -> Any:
        """The training data."""
        raise _missing(self, "train_dataloader")

    @base_hook
    def val_dataloader(self) -> Any:
        """The validation data (a loader or a list of them)."""
        raise _missing(self, "val_dataloader")

    @base_hook
    def test_dataloader(self) -> Any:
        """The test data (a loader or a list of them)."""
        raise _missing(self, "test_dataloader")

    @base_hook
    def predict_dataloader(self) -> Any:
        """The data to predict on (a loader or a list of them)."""
        raise _missing(self, "predict_dataloader")


class DataModule(HyperparametersMixin, LoaderPlaceholders):
    """Subclass and define ``train_dataloader()``, ``val_dataloader()``, ... and the hooks you need."""

    #: The Trainer running this DataModule (set by ``trainer.fit``/``validate``/... ; None before).
    trainer: Any = None
    #: False: ``prepare_data`` runs on the first node only (on local rank 0 of every node by default).
    prepare_data_per_node: bool = True
    #: Where a checkpoint keeps the DataModule's hyperparameters (Lightning's keys).
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def __init__(self) -> None:
        super().__init__()

    @base_hook
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to the device (override to change how; then the module's is not called, as in
        Lightning): every tensor in nested containers."""
        from ember.core.hooks.defaults import move_to_device

        return move_to_device(batch, device)

    @classmethod
    def from_datasets(cls, train_dataset: Any = None, val_dataset: Any = None, test_dataset: Any = None,
                      predict_dataset: Any = None, batch_size: int = 1, num_workers: int = 0,
                      **datamodule_kwargs: Any) -> Any:
        """A DataModule whose dataloaders serve these datasets (each a ``Dataset``, or a list/dict of them for
        several dataloaders), ``batch_size`` and ``num_workers`` in each, shuffled for training (unless
        iterable). ``batch_size``/``num_workers`` also go to ``cls.__init__`` where it takes them, with
        ``datamodule_kwargs``."""
        params = inspect.signature(cls.__init__).parameters
        special = {"batch_size": batch_size, "num_workers": num_workers}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            special = {k: v for k, v in special.items() if k in params}
        datamodule = cls(**datamodule_kwargs, **special)
        for method, datasets, shuffle in (("train_dataloader", train_dataset, True),
                                          ("val_dataloader", val_dataset, False),
                                          ("test_dataloader", test_dataset, False),
                                          ("predict_dataloader", predict_dataset, False)):
            if datasets is not None:
                setattr(datamodule, method, _loaders_of(datasets, shuffle, batch_size, num_workers))
        return datamodule

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None,
                             hparams_file: Any = None, weights_only: bool | None = True, checkpoint_io: Any = "torch",
                             **overrides: Any) -> Any:
        """Build the DataModule from a checkpoint: ``cls(**saved hyperparameters, **overrides)``, then its
        ``load_state_dict`` with the state the checkpoint keeps for it. ``map_location`` and ``hparams_file``
        are Lightning's and unused (the file is read to the CPU; its hyperparameters come from the checkpoint)."""
        from ember.core.checkpointing.checkpoint_format import load_datamodule

        return load_datamodule(cls, checkpoint_path, weights_only=weights_only is not False,
                               checkpoint_io=checkpoint_io, **overrides)

    @base_hook
    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints (override; the default keeps none)."""
        return {}

    @base_hook
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (override)."""

    def __str__(self) -> str:
        """One line per dataloader method, with the size of each dataset it gives (``{Train dataloader:
        size=64}``), or None where the method is missing or fails (before ``setup``, say)."""
        lines = []
        for label, method in (("Train", "train_dataloader"), ("Validation", "val_dataloader"),
                              ("Test", "test_dataloader"), ("Predict", "predict_dataloader")):
            try:
                loaders = getattr(self, method)()
            except Exception:
                text = "None"
            else:
                if isinstance(loaders, Mapping):
                    loaders = list(loaders.values())
                if isinstance(loaders, (list, tuple)):
                    text = " ; ".join(f"{i}. {_size(loader)}" for i, loader in enumerate(loaders, start=1))
                else:
                    text = _size(loaders)
            lines.append(f"{{{label} dataloader: {text}}}")
        return os.linesep.join(lines)




class MissingDataloaderError(ConfigurationError, AttributeError):
    """A DataModule was asked for a dataloader method it does not define."""


def _missing(owner: Any, name: str) -> MissingDataloaderError:
    return MissingDataloaderError(f"`{name}` must be implemented in {type(owner).__name__} before it can be asked for "
                                  f"data: define {name}() (a DataModule may take its datasets from from_datasets), "
                                  "or pass the loaders to the Trainer's method.")


def _loaders_of(datasets: Any, shuffle: bool, batch_size: int, num_workers: int) -> Callable[[], Any]:
    def loader(dataset: Dataset) -> DataLoader:
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle and not isinstance(dataset, IterableDataset),
                          num_workers=num_workers, pin_memory=torch.cuda.is_available())

    def dataloaders() -> Any:
        if isinstance(datasets, Mapping):
            return {key: loader(ds) for key, ds in datasets.items()}
        if isinstance(datasets, (list, tuple)):
            return [loader(ds) for ds in datasets]
        return loader(datasets)

    return dataloaders


def _size(loader: Any) -> str:
    dataset = getattr(loader, "dataset", None)
    return f"size={len(dataset)}" if isinstance(dataset, Sized) else "size=NA"


setattr(DataModule, STYLE_ATTR, "module")
add_base_hooks(DataModule, ["prepare_data", "setup", "teardown", "on_exception", "on_before_batch_transfer",
                            "on_after_batch_transfer"])
