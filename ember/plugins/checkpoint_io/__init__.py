"""Checkpoint storage: where checkpoint bytes are written and read (``checkpoint_io.torch``)."""
