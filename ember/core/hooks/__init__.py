"""The plugin machinery: how plugins are found (``discovery``), registered (``plugin_manager``, ``class_hooks``,
``positional``), called (``dispatch``, ``tracing``), which Trainer arguments exist and where their values come from (``options``, ``config``, ``trainer_args``), and
core's plain-PyTorch answer to every role hook (``defaults``).

May import: ``ember.hookspecs`` and ``ember.core.errors``; nothing else of ember (no loop, no Trainer).
"""
