"""Callbacks: plugins that act on the loop's events (``callback.model-checkpoint``, ...)."""
