"""Fixtures for people who write ember plugins (loaded by pytest through the ``pytest11`` entry point).

Imports torch only when a fixture is used, so having ember installed costs other test suites nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def tiny_model() -> Any:
    """A fresh :class:`ember.testing.TinyClassifier`."""
    from ember.testing import TinyClassifier

    return TinyClassifier()


@pytest.fixture
def tiny_data() -> tuple[Any, Any]:
    """(train, val) loaders of 64 samples in batches of 8."""
    from ember.testing import tiny_loaders

    return tiny_loaders()


@pytest.fixture
def ember_trainer(tmp_path: Any) -> Callable[..., Any]:
    """A factory: ``ember_trainer(plugins=[...], max_epochs=2)`` makes a Trainer with fast defaults that
    writes under the test's temporary directory."""
    from ember import Trainer
    from ember.testing import FAST_TRAINER_ARGS

    def make(**kwargs: Any) -> Trainer:
        args = {**FAST_TRAINER_ARGS, "default_root_dir": str(tmp_path), **kwargs}
        return Trainer(**args)

    return make


@pytest.fixture
def hook_recorder() -> Any:
    """A :class:`ember.testing.HookRecorder`; call ``hook_recorder.attach(trainer)`` before running."""
    from ember.testing import HookRecorder

    return HookRecorder()
