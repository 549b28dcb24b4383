"""``trainer._data_connector``: what Lightning code calls to attach data to a Trainer by hand, outside a run.

Lightning's Trainer keeps its data sources in a connector object; tests and some utilities call it directly
(``trainer._data_connector.attach_data(model, ...)``, then ``trainer.fit_loop.setup_data()``). Ember's Trainer
attaches the module, the DataModule and the loaders itself when a run starts; this adapter does the same
outside a run, onto the same state, so that the loop views' ``setup_data`` (:mod:`ember.core.loop.loop_views`)
reads the loaders as the run would. A run attaches its own data again.
"""

from __future__ import annotations

from typing import Any

from ember.core.hooks.positional import defines


class DataConnector:
    """The data sources of one Trainer, attached by hand (Lightning's names and arguments)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def prepare_data(self) -> None:
        """The DataModule's, then the module's ``prepare_data``, where a run would call them: on local rank 0 of
        every node, or of the first node only for an object with ``prepare_data_per_node = False``."""
        t = self.trainer
        for owner in (t.datamodule, t.module):
            if owner is None or not defines(owner, "prepare_data") or t.local_rank != 0:
                continue
            if getattr(owner, "prepare_data_per_node", True) or t.node_rank == 0:
                owner.prepare_data()

    def attach_data(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
                    test_dataloaders: Any = None, predict_dataloaders: Any = None, datamodule: Any = None) -> None:
        """:meth:`attach_dataloaders`, then :meth:`attach_datamodule`."""
        self.attach_dataloaders(model, train_dataloaders, val_dataloaders, test_dataloaders, predict_dataloaders)
        self.attach_datamodule(model, datamodule)

    def attach_dataloaders(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
                           test_dataloaders: Any = None, predict_dataloaders: Any = None) -> None:
        """The loaders of each stage (None: the DataModule's or ``model``'s ``*_dataloader()``, asked when read)."""
        t = self.trainer
        t.module = model
        t.loop.attached = {"train": train_dataloaders, "validate": val_dataloaders, "test": test_dataloaders,
                           "predict": predict_dataloaders}

    def attach_datamodule(self, model: Any, datamodule: Any = None) -> None:
        """``datamodule`` becomes the Trainer's (its loaders then come before ``model``'s)."""
        t = self.trainer
        t.module = model
        if datamodule is not None:
            t.datamodule = datamodule
            datamodule.trainer = t


def install(trainer_class: type) -> None:
    """Give ``trainer_class`` the ``_data_connector`` attribute (once a script takes Lightning's Trainer)."""
    if "_data_connector" not in vars(trainer_class):
        trainer_class._data_connector = property(DataConnector)  # type: ignore[attr-defined]
