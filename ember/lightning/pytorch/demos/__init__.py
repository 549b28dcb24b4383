"""``lightning.pytorch.demos``: small models and data for trying things out and for tests."""
