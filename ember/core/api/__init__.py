"""The classes users touch: ``Trainer`` (``trainer``, with Lightning's read-only properties in
``trainer_properties``), ``Module`` (``module``; its ``save_hyperparameters`` in ``hparams``), ``DataModule``
(``datamodule``), ``Callback`` (``callback``) and ``ember.log`` (``logging_api``).

May import everything else in ``ember.core``; nothing in ``ember.core`` imports it.
"""
