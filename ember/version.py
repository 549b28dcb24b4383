"""ember's version (a module of its own, so that any part of ember can read it without importing ``ember``)."""

__version__ = "0.1.0"
