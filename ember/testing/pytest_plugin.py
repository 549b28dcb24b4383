"""Fixtures for people who write ember plugins (loaded by pytest through the ``pytest11`` entry point).

Imports torch only when a fixture is used, so having ember installed costs other test suites nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


@pytest.fixture
def ember_run(tmp_path: Any) -> Callable[..., Any]:
    """A factory: ``ember_run(MyPlugin(), stage="fit", max_epochs=2)`` runs a
    :class:`~ember.testing.TinyClassifier` with the plugin and returns a :class:`~ember.testing.RunResult`
    (``.trainer``, ``.model``, ``.recorder``, ``.output``); the run writes under the test's temporary
    directory. See :func:`ember.testing.run_plugin`."""
    from ember.testing import run_plugin

    def run(*plugins: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("default_root_dir", str(tmp_path))
        return run_plugin(*plugins, **kwargs)

    return run


@pytest.fixture
def ember_distribution(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """A factory for fake installed distributions, visible to ember's discovery for this test only:
    ``ember_distribution("my-dist", entry_points={"ember.autoload": {"callback.x": "my_mod:X"}},
    modules={"my_mod.py": source})``. See :func:`ember.testing.make_distribution`."""
    from ember.testing import forget_modules, make_distribution

    created: list[str] = []

    def make(name: str, version: str = "1.0", entry_points: Any = None, modules: Any = None) -> str:
        root = tmp_path / f"dist-{name}-{len(created)}"
        make_distribution(root, name, version, entry_points, modules)
        monkeypatch.syspath_prepend(str(root))
        created.extend(m.rsplit(".py", 1)[0].replace("/", ".") for m in (modules or {}))
        return str(root)

    yield make
    forget_modules(created)
