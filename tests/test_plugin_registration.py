"""Registering and unregistering plugins: the hooks found are the same whether or not the plugin's class was read
before, a class changed since is read again, and unregistering leaves no implementation behind."""

from __future__ import annotations

import types
from typing import Any

import pluggy
import pytest

import ember
from ember.core.hooks.plugin_manager import PluginManager
from ember.testing import TinyClassifier


class Plain:
    def on_train_start(self, trainer: Any) -> None: ...

    def helper(self) -> None: ...


class Marked:
    @ember.hookimpl
    def configure(self, trainer: Any) -> None: ...

    @ember.hookimpl(specname="on_fit_end")
    def finish(self, trainer: Any) -> None: ...

    @staticmethod
    @ember.hookimpl
    def teardown(trainer: Any) -> None: ...

    @classmethod
    @ember.hookimpl(tryfirst=True)
    def on_train_end(cls, trainer: Any) -> None: ...


class Sub(Marked, Plain):
    def on_validation_start(self, trainer: Any) -> None: ...


def hooks_of(pm: PluginManager, plugin: Any) -> list[str]:
    return sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())


def scanned_by_pluggy(pm: PluginManager, plugin: Any) -> list[str]:
    """pluggy's own answer: every hook asked whether it holds the plugin."""
    return sorted(caller.name for caller in pluggy.PluginManager.get_hookcallers(pm, plugin) or ())


def instance_with_own_method() -> Any:
    plugin = Plain()
    plugin.on_train_end = lambda trainer: None  # an instance attribute named like a hook
    return plugin


MARKED = ["configure", "on_fit_end", "on_train_end", "teardown"]


@pytest.mark.parametrize(("make", "expected"), [
    (Plain, ["on_train_start"]), (Marked, MARKED), (Sub, sorted([*MARKED, "on_train_start", "on_validation_start"])),
    (TinyClassifier, []), (instance_with_own_method, ["on_train_end", "on_train_start"]),
    (lambda: types.SimpleNamespace(configure=ember.hookimpl(lambda trainer: None)), ["configure"]),
], ids=["plain", "marked", "subclass", "module", "own-method", "namespace"])
def test_hooks_found_are_the_same_on_every_registration_and_match_pluggys_scan(make: Any, expected: list) -> None:
    pm = PluginManager()
    answers = []
    for _ in range(3):  # the first registration reads the class; the next ones reuse what it read
        plugin = make()
        pm.register(plugin, name="p")
        answers.append((hooks_of(pm, plugin), scanned_by_pluggy(pm, plugin),
                        sorted((i.opts["tryfirst"], i.plugin_name) for c in pm.get_hookcallers(plugin) or ()
                               for i in c.get_hookimpls() if i.plugin is plugin)))
        pm.unregister(plugin)
        assert scanned_by_pluggy(pm, plugin) == []
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0] == answers[0][1] == expected


def test_a_class_changed_after_registration_is_read_again() -> None:
    class Changing:
        def on_train_start(self, trainer: Any) -> None: ...

        def later(self, trainer: Any) -> None: ...

    pm = PluginManager()

    def registered_hooks() -> list[str]:
        plugin = Changing()
        pm.register(plugin, name="p")
        try:
            assert hooks_of(pm, plugin) == scanned_by_pluggy(pm, plugin)
            return hooks_of(pm, plugin)
        finally:
            pm.unregister(plugin)

    assert registered_hooks() == ["on_train_start"]
    Changing.on_train_end = lambda self, trainer: None  # type: ignore[attr-defined]
    assert registered_hooks() == ["on_train_end", "on_train_start"]
    del Changing.on_train_start
    assert registered_hooks() == ["on_train_end"]
    ember.hookimpl(specname="on_fit_start")(Changing.later)  # marked in place: the class's __dict__ is unchanged
    assert registered_hooks() == ["on_fit_start", "on_train_end"]
    del Changing.later.ember_impl  # type: ignore[attr-defined]
    assert registered_hooks() == ["on_train_end"]


def test_a_base_class_changed_after_registration_is_read_again() -> None:
    class Base:
        pass

    class Child(Base):
        pass

    pm = PluginManager()
    first = Child()
    pm.register(first, name="p")
    assert hooks_of(pm, first) == []
    pm.unregister(first)
    Base.on_fit_start = lambda self, trainer: None  # type: ignore[attr-defined]
    second = Child()
    pm.register(second, name="p")
    assert hooks_of(pm, second) == ["on_fit_start"]


def test_unregistering_by_name_or_object_removes_every_implementation() -> None:
    pm = PluginManager()
    by_object, by_name = Sub(), Sub()
    pm.register(by_object, name="a")
    pm.register(by_name, name="b")
    assert hooks_of(pm, by_object) == scanned_by_pluggy(pm, by_object) != []
    pm.unregister(by_object)
    pm.unregister(name="b")
    for caller in vars(pm.hook).values():
        assert all(impl.plugin not in (by_object, by_name) for impl in caller.get_hookimpls())
    assert pm.get_hookcallers(by_object) is None


def test_hook_specs_read_from_a_module_are_pluggys() -> None:
    from ember.hookspecs import spec_modules

    module = types.ModuleType("specs")
    module.marked = ember.hookspec(lambda trainer: None)  # type: ignore[attr-defined]
    module.plain = lambda trainer: None  # type: ignore[attr-defined]
    module.wrapped = staticmethod(ember.hookspec(lambda trainer: None))  # type: ignore[attr-defined]
    module.number = 3  # type: ignore[attr-defined]
    ours, theirs = PluginManager(), pluggy.PluginManager("ember")
    for namespace in [*spec_modules(), module]:
        for name in dir(namespace):
            assert ours.parse_hookspec_opts(namespace, name) == theirs.parse_hookspec_opts(namespace, name), name
    assert ours.parse_hookspec_opts(module, "marked") is not None


def test_registering_leaves_the_instance_as_it_was_and_calls_its_bound_methods() -> None:
    pm = PluginManager()
    plugin = Sub()
    before = dict(vars(plugin))
    pm.register(plugin, name="p")
    assert vars(plugin) == before
    impls = {c.name: i.function for c in pm.get_hookcallers(plugin) or () for i in c.get_hookimpls()}
    assert impls == {"on_train_start": plugin.on_train_start, "on_validation_start": plugin.on_validation_start,
                     "configure": plugin.configure, "on_fit_end": plugin.finish, "teardown": Sub.teardown,
                     "on_train_end": Sub.on_train_end}
    assert impls["on_train_start"].__self__ is plugin
    pm.unregister(plugin)
    assert vars(plugin) == before


def test_a_plugin_with_slots_registers() -> None:
    class Slotted:
        __slots__ = ("state",)

        def on_train_start(self, trainer: Any) -> None: ...

        @ember.hookimpl
        def configure(self, trainer: Any) -> None: ...

    pm = PluginManager()
    plugin = Slotted()
    pm.register(plugin, name="p")
    assert hooks_of(pm, plugin) == scanned_by_pluggy(pm, plugin) == ["configure", "on_train_start"]


def test_the_classes_read_are_bounded() -> None:
    from ember.core.hooks import class_hooks

    pm = PluginManager()
    for i in range(class_hooks._KEPT + 10):
        plugin = type(f"Made{i}", (Plain,), {})()
        pm.register(plugin, name="p")
        assert hooks_of(pm, plugin) == ["on_train_start"]
        pm.unregister(plugin)
    assert len(class_hooks._cache) <= class_hooks._KEPT
