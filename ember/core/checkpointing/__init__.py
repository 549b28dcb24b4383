"""Checkpoints: what one holds and how a fit resumes from it (``checkpoint``), the file's content and format
versions (``checkpoint_format``), which file a ``ckpt_path`` means and where a run's files go
(``checkpoint_paths``), how a save reaches storage off the training thread (``checkpoint_writes``,
``async_writer``), which plugins keep state in it (``plugin_state``), and how a restarted job resumes by itself
(``restarts``).

May import: ``ember.core.loop`` (the records a checkpoint saves), ``ember.core.hooks``, ``ember.core.errors``,
``ember.hookspecs``.
"""
