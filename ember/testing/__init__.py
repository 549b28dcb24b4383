"""Helpers for testing ember plugins: a small model and data, a recorder of hook calls with assertions, a
one-call run of a plugin, fake installed distributions, and a checkpoint round trip for plugin state.

Also a pytest plugin (``ember.testing.pytest_plugin``, registered through the ``pytest11`` entry point, so it
is active wherever ember is installed) with the fixtures ``tiny_model``, ``tiny_data``, ``ember_trainer``,
``hook_recorder``, ``ember_run`` and ``ember_distribution``. See docs/writing-plugins.md, "Testing".
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import torch
from torch.utils.data import DataLoader, TensorDataset

from ember.core.api.module import Module
from ember.core.hooks.plugin_manager import EVENT_HOOKS
from ember.hookspecs import hookimpl

__all__ = [
    "FAST_TRAINER_ARGS",
    "HookRecorder",
    "RunResult",
    "TinyClassifier",
    "check_plugin",
    "checkpoint_roundtrip",
    "make_distribution",
    "run_plugin",
    "tiny_dataset",
    "tiny_loaders",
]

#: Trainer arguments for quick tests: on the CPU (so results compare with CPU tensors on any machine; pass
#: ``accelerator=`` to test another device), one short epoch, no sanity check, and quiet (no progress bar, model
#: summary, logger or checkpoint files).
FAST_TRAINER_ARGS: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 1, "num_sanity_val_steps": 0,
                                     "enable_progress_bar": False, "enable_model_summary": False, "logger": False,
                                     "enable_checkpointing": False}


def tiny_dataset(n: int = 64, features: int = 8, classes: int = 3, seed: int = 0) -> TensorDataset:
    """A learnable classification set: labels are a fixed linear function of the features."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    return TensorDataset(x, (x @ w).argmax(1))


def tiny_loaders(n: int = 64, batch_size: int = 8, shuffle: bool = False, **kwargs: Any) -> tuple[DataLoader, DataLoader]:
    """(train, val) loaders over :func:`tiny_dataset`."""
    ds = tiny_dataset(n, **kwargs)
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle), DataLoader(ds, batch_size=batch_size)


class TinyClassifier(Module):
    """A two-layer classifier that logs ``train_loss``, ``val_loss``, ``val_acc``, ``test_acc``."""

    def __init__(self, features: int = 8, classes: int = 3, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, classes))
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class HookRecorder:
    """Records every hook call of a trainer's runs, in order, with the plugins that implement it.

    ``recorder.attach(trainer)`` before ``fit``; then ``recorder.names`` is the list of hook names called
    and ``recorder.calls`` the list of ``(hook name, [plugin identities])``. Event hooks nobody implements
    are not called by the loop, so the recorder also registers a plugin implementing every event hook;
    ``events_only=True`` keeps only event hooks in ``names``.
    """

    def __init__(self, events_only: bool = False) -> None:
        self.events_only = events_only
        self.calls: list[tuple[str, list[str]]] = []
        self.kwargs: list[dict[str, Any]] = []

    def attach(self, trainer: Any) -> HookRecorder:
        pm = trainer.plugin_manager

        def before(hook_name: str, impls: list, kwargs: dict) -> None:
            if self.events_only and hook_name not in EVENT_HOOKS:
                return
            self.calls.append((hook_name, [i.plugin_name for i in impls]))
            self.kwargs.append(dict(kwargs))

        def after(outcome: Any, hook_name: str, impls: list, kwargs: dict) -> None:
            pass

        pm.add_hookcall_monitoring(before, after)
        trainer.extra_plugins.append(("testing.every-event", _every_event_plugin()))
        return self

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def clear(self) -> None:
        self.calls.clear()
        self.kwargs.clear()

    # -- queries -----------------------------------------------------------------------------------------
    def count(self, hook: str) -> int:
        """How many times ``hook`` was called."""
        return sum(1 for name, _ in self.calls if name == hook)

    def calls_of(self, hook: str) -> list[dict[str, Any]]:
        """The keyword arguments of every call of ``hook``, in order."""
        return [kw for (name, _), kw in zip(self.calls, self.kwargs, strict=True) if name == hook]

    def plugins_for(self, hook: str) -> list[str]:
        """The plugins implementing ``hook`` at its last call, in call order (first called first)."""
        for name, plugins in reversed(self.calls):
            if name == hook:
                return list(reversed(plugins))
        return []

    # -- assertions --------------------------------------------------------------------------------------
    def assert_called(self, hook: str, times: int | None = None, by: str | None = None) -> None:
        """``hook`` was called (exactly ``times`` times, if given), with the plugin ``by`` among its
        implementations (if given)."""
        _check_hook_name(hook)
        n = self.count(hook)
        if n == 0:
            raise AssertionError(f"hook {hook!r} was never called; called: {_summary(self.names)}")
        if times is not None and n != times:
            raise AssertionError(f"hook {hook!r} was called {n} times, expected {times}")
        if by is not None and not any(name == hook and by in plugins for name, plugins in self.calls):
            raise AssertionError(f"hook {hook!r} was called, but {by!r} never implemented it; implementations: "
                                 f"{self.plugins_for(hook)}")

    def assert_not_called(self, hook: str) -> None:
        _check_hook_name(hook)
        n = self.count(hook)
        if n:
            raise AssertionError(f"hook {hook!r} was called {n} times, expected never")

    def assert_order(self, *hooks: str) -> None:
        """The hooks were called in this order (other calls may come between them)."""
        for hook in hooks:
            _check_hook_name(hook)
        position = 0
        names = self.names
        for hook in hooks:
            try:
                position = names.index(hook, position) + 1
            except ValueError:
                raise AssertionError(f"expected {hook!r} after {' -> '.join(hooks[:hooks.index(hook)]) or 'the start'}"
                                     f" in the order {' -> '.join(hooks)}; called: {_summary(names)}") from None

    def assert_plugin_order(self, hook: str, *plugins: str) -> None:
        """At its last call, ``hook``'s implementations ran with ``plugins`` in this relative order."""
        actual = [p for p in self.plugins_for(hook) if p in plugins]
        if actual != list(plugins):
            raise AssertionError(f"implementations of {hook!r} ran in the order {self.plugins_for(hook)}; "
                                 f"expected {list(plugins)} in that relative order")


def _check_hook_name(hook: str) -> None:
    from ember.core.errors import suggest
    from ember.hookspecs.reference import spec_names

    names = spec_names()
    if hook not in names:
        raise AssertionError(f"{hook!r} is not an ember hook.{suggest(hook, names)}")


def _summary(names: list[str], limit: int = 40) -> str:
    shown: list[list[Any]] = []
    for name in names:
        if not shown or shown[-1][0] != name:
            shown.append([name, 1])
        else:
            shown[-1][1] += 1
    text = ", ".join(n if c == 1 else f"{n} x{c}" for n, c in shown[:limit])
    return text + (", ..." if len(shown) > limit else "") if text else "(nothing)"


def _every_event_plugin() -> Any:
    def make(name: str) -> Any:
        def impl(self: Any) -> None:
            return None

        impl.__name__ = name
        return hookimpl(trylast=True)(impl)

    namespace = {name: make(name) for name in sorted(EVENT_HOOKS)
                 if name not in ("on_before_batch_transfer", "on_after_batch_transfer")}
    return type("EveryEvent", (), namespace)()


# -- running a plugin ----------------------------------------------------------------------------------------


@attrs.define
class RunResult:
    """What :func:`run_plugin` ran: the trainer, the model, the recorder and what the stage returned."""

    trainer: Any
    model: Any
    recorder: HookRecorder
    output: Any = None


def run_plugin(*plugins: Any, stage: str = "fit", model: Any = None, data: Any = None,
               record_events: bool = True, **trainer_args: Any) -> RunResult:
    """Run ``stage`` (``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``) of a :class:`TinyClassifier` with
    ``plugins`` registered, recording every hook call.

    Uses :data:`FAST_TRAINER_ARGS` (one epoch, no sanity check) unless overridden by ``trainer_args``.
    ``data`` is a ``(train, val)`` pair of loaders (default :func:`tiny_loaders`). ``record_events=False``
    records only the hooks somebody implements (the recorder otherwise adds a no-op implementation of every
    event hook, so that ``assert_order`` sees them all).
    """
    from ember.core.api.trainer import Trainer

    if stage not in ("fit", "validate", "test", "predict"):
        raise ValueError(f"run_plugin(stage={stage!r}): expected 'fit', 'validate', 'test' or 'predict'")
    args = {**FAST_TRAINER_ARGS, **trainer_args}
    args["plugins"] = [*plugins, *_tuple(args.get("plugins"))]
    trainer = Trainer(**args)
    recorder = HookRecorder()
    if record_events:
        recorder.attach(trainer)
    else:
        _monitor(recorder, trainer)
    model = TinyClassifier() if model is None else model
    train, val = tiny_loaders() if data is None else data
    output: Any = None
    if stage == "fit":
        trainer.fit(model, train, val)
    elif stage == "predict":
        output = trainer.predict(model, val)
    else:
        output = getattr(trainer, stage)(model, val)
    return RunResult(trainer, model, recorder, output)


def _tuple(value: Any) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _monitor(recorder: HookRecorder, trainer: Any) -> None:
    def before(hook_name: str, impls: list, kwargs: dict) -> None:
        recorder.calls.append((hook_name, [i.plugin_name for i in impls]))
        recorder.kwargs.append(dict(kwargs))

    trainer.plugin_manager.add_hookcall_monitoring(before, lambda *a: None)


def check_plugin(plugin: Any, identity: str = "plugin.under-test") -> list[str]:
    """Register ``plugin`` with a fresh plugin manager, as a run would, and return the hooks it implements.

    Raises :class:`ember.PluginError` with ember's message when an implementation names an unknown hook or an
    argument its spec lacks.
    """
    from ember.core.hooks.plugin_manager import PluginManager

    pm = PluginManager()
    pm.register(plugin, name=identity)
    return sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())


def checkpoint_roundtrip(plugin: Any, restored: Any, trainer: Any = None, module: Any = None) -> dict[str, Any]:
    """Save ``plugin``'s state as a checkpoint would, load it the way checkpoints load
    (``torch.load(weights_only=True)``) and hand it to ``restored``: its ``load_state_dict`` (for a plugin
    with ``state_dict``/``load_state_dict``, kept under its ``state_key`` or identity, as a run does), then its
    ``on_load_checkpoint``.

    The hooks are called through a plugin manager, so their signatures are checked against the specs.
    Returns the loaded checkpoint dict; fails if the state does not survive ``weights_only`` loading.
    """
    from ember.core.hooks.plugin_manager import PluginManager

    def key_of(obj: Any) -> str:
        key = getattr(obj, "state_key", None)
        return key if isinstance(key, str) else getattr(obj, "identity", "plugin.under-test")

    checkpoint: dict[str, Any] = {"plugins": {}}
    if callable(getattr(plugin, "state_dict", None)) and callable(getattr(plugin, "load_state_dict", None)):
        checkpoint["plugins"][key_of(plugin)] = plugin.state_dict()
    saver = PluginManager()
    saver.register(plugin, name=getattr(plugin, "identity", "plugin.under-test"))
    saver.hook.on_save_checkpoint(trainer=trainer, module=module, checkpoint=checkpoint)
    buffer = io.BytesIO()
    try:
        torch.save(checkpoint, buffer)
    except Exception as exc:
        raise AssertionError(f"the checkpoint state of {type(plugin).__name__} cannot be saved: {exc}") from exc
    buffer.seek(0)
    try:
        loaded = torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise AssertionError(f"the checkpoint state of {type(plugin).__name__} does not load with "
                             f"weights_only=True: {exc}. Store tensors and plain containers of numbers and "
                             "strings only.") from exc
    if callable(getattr(restored, "load_state_dict", None)) and key_of(restored) in loaded["plugins"]:
        restored.load_state_dict(loaded["plugins"][key_of(restored)])
    loader = PluginManager()
    loader.register(restored, name=getattr(restored, "identity", "plugin.under-test"))
    loader.hook.on_load_checkpoint(trainer=trainer, module=module, checkpoint=loaded)
    return loaded


# -- fake installed distributions ---------------------------------------------------------------------------


def make_distribution(root: str | os.PathLike, name: str, version: str = "1.0",
                      entry_points: Mapping[str, Mapping[str, str]] | None = None,
                      modules: Mapping[str, str] | None = None) -> str:
    """Write a minimal installed distribution into the directory ``root`` (to be put on ``sys.path``).

    ``entry_points`` maps a group (``"ember.plugins"``, ``"ember.autoload"``) to ``{identity: "module:attr"}``;
    ``modules`` maps a module file name (``"my_plugin.py"``) to its source. Returns ``root``.
    """
    root = os.fspath(root)
    dist_info = os.path.join(root, f"{name.replace('-', '_')}-{version}.dist-info")
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, entries in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines += [f"{ident} = {value}" for ident, value in entries.items()]
        lines.append("")
    with open(os.path.join(dist_info, "entry_points.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    for filename, source in (modules or {}).items():
        path = os.path.join(root, filename)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
    importlib.invalidate_caches()
    return root


def forget_modules(names: Iterable[str]) -> None:
    """Drop modules (and their submodules) from ``sys.modules``, so a test's fake plugin modules are fresh."""
    for name in list(sys.modules):
        if any(name == n or name.startswith(n + ".") for n in names):
            del sys.modules[name]
