"""Ember's built-in plugins. Each module is one plugin, declared as an entry point in ember's
``pyproject.toml`` exactly like a third party's; nothing in ember imports these modules directly."""
