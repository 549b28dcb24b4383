"""The classes users touch: ``Trainer`` (``trainer``, with Lightning's read-only properties in
``trainer_properties``), ``Module`` (``module``; its ``save_hyperparameters`` in ``hparams``), ``DataModule``
(``datamodule``), ``Callback`` (``callback``) and ``ember.log`` (``logging_api``); a logger object that answers no
hook, used as Lightning's Trainer uses it (``logger_adapter``), the loggers' stand-in of a ``fast_dev_run``
(``null_logger``); which Trainer selected a role plugin, and the device it will run on (``role_plugins``).

May import everything else in ``ember.core``; nothing in ``ember.core`` imports it.
"""
