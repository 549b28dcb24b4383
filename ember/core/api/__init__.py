"""The classes users touch: ``Trainer`` (``trainer``, with Lightning's read-only properties in
``trainer_properties``), ``Module`` (``module``), ``DataModule`` (``datamodule``), ``Callback`` (``callback``)
and ``ember.log`` (``logging_api``).

May import everything else in ``ember.core``; nothing in ``ember.core`` imports it.
"""
