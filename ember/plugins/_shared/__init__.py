"""Helpers several plugin families use. Not plugins: nothing here registers or implements a hook, and no plugin
module imports another family's module (``tests/test_architecture.py`` checks it); what they share lives here."""
