"""The adapter that makes Lightning's ``Precision``, ``Accelerator``, ``Strategy`` and ``CheckpointIO`` classes
ember plugins.

A seed object carries its hook implementations itself, so ``Trainer(plugins=[MyPrecision()])``,
``Trainer(accelerator=MyAccelerator())`` or ``Trainer(strategy=DDPStrategy(...))`` use it as given:

* each role hook the class has a Lightning method for is answered by an implementation (a method named
  ``_ember_<hook>``, marked ``@hookimpl(specname=<hook>)``) that calls that method with Lightning's arguments,
  so a subclass's override changes exactly the work Lightning gives that method;
* a built-in class (``MixedPrecision("bf16-mixed", "cpu")``, ``DDPStrategy(find_unused_parameters=True)``) holds
  the ember plugin it configures (:attr:`SeedPlugin.plugin`); its Lightning methods do their work through that
  plugin's implementations (:meth:`SeedPlugin.delegate`), and the plugin's other hooks (launching processes,
  wrapping the module, ...) are forwarded to it unchanged (:func:`forwarders`);
* a Lightning method named like an ember event (``setup``, ``teardown``, ``on_train_start``, ...) is an event
  implementation when a subclass overrides it, as on a callback.

Lightning emits ``on_before_backward``/``on_after_backward`` from inside ``Precision.pre_backward``/
``post_backward``; here the loop emits them around the ``backward`` hook, so an override cannot drop them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

from ember.core.hooks.class_hooks import IMPL_MARK
from ember.core.hooks.positional import base_hook
from ember.hookspecs import hookimpl

__all__ = ["CoversEmber", "SeedPlugin", "add_forwarders", "base_hook", "forwarders"]


class CoversEmber(type):
    """``isinstance(trainer.strategy, DDPStrategy)`` (or ``trainer.accelerator, CPUAccelerator``) holds for ember's
    plugin of that kind selected by name (``strategy="ddp"``, ``accelerator="cpu"``), as Lightning code expects: a
    built-in seed class (not a user's subclass of it) counts the ember plugin classes in its ``_ember_kinds`` as
    its instances."""

    def __instancecheck__(cls, obj: Any) -> bool:
        kinds = cls.__dict__.get("_ember_kinds", ())
        return super().__instancecheck__(obj) or (bool(kinds) and isinstance(obj, kinds))


class SeedPlugin:
    """The base of every seed class: its role, identity and inner ember plugin."""

    role = "plugin"
    #: The ember plugin class a built-in configures (None: the plain PyTorch fallback does the work).
    plugin_class: type | None = None
    #: The ember plugin classes a built-in seed class counts as its instances (see :class:`CoversEmber`).
    _ember_kinds: tuple[type, ...] = ()
    _plugin: Any = None
    _trainer: Any = None

    def plugin_arguments(self) -> dict[str, Any]:
        """The keyword arguments of :attr:`plugin_class` (a built-in's constructor arguments, as ember's)."""
        return {}

    @property
    def plugin(self) -> Any:
        """The ember plugin doing the built-in work, made on first use (a subclass may skip ``__init__``)."""
        if self._plugin is None and self.plugin_class is not None:
            self._plugin = self.plugin_class(**self.plugin_arguments())
        return self._plugin

    @property
    def identity(self) -> str:
        own = getattr(self.plugin, "identity", None)
        return own if isinstance(own, str) else f"{self.role}.{type(self).__name__}"

    @property
    def trainer(self) -> Any:
        """The trainer of the run in progress (None outside a run)."""
        return self._trainer

    @hookimpl(specname="configure", tryfirst=True)
    def _ember_configure(self, trainer: Any) -> None:
        self._trainer = trainer
        self.connect_trainer(trainer)

    def connect_trainer(self, trainer: Any) -> None:
        """Called once per run before any other hook of the seed object (a seed class's own setup)."""

    def check_available(self, config: Any) -> None:
        check = getattr(self.plugin, "check_available", None)
        if callable(check):
            check(config)

    def delegate(self, hook: str, fallback: Any = None, **arguments: Any) -> Any:
        """The answer of the inner plugin's implementation of ``hook``, called with the arguments it takes (the
        trainer's among them); ``fallback`` when it has none. An inner wrapper is run around ``fallback`` (the
        answer of the rest of the chain)."""
        function = _implementation(self.plugin, hook)
        if function is None:
            return fallback
        kwargs = {"trainer": self._trainer, **arguments}
        taken = {name: kwargs[name] for name in _parameters(function) if name in kwargs}
        result = function(**taken)
        if not inspect.isgenerator(result):
            return fallback if result is None else result
        next(result)
        try:
            result.send(fallback)
        except StopIteration as done:
            return done.value
        raise RuntimeError(f"{type(self.plugin).__name__}.{hook} yielded twice")


def _implementation(plugin: Any, hook: str) -> Callable[..., Any] | None:
    """The bound method of ``plugin`` marked ``@hookimpl`` for ``hook``, or None."""
    if plugin is None:
        return None
    for name in (hook, *dir(type(plugin))):
        function = inspect.getattr_static(plugin, name, None)
        opts = getattr(function, IMPL_MARK, None)
        if isinstance(opts, dict) and (opts.get("specname") or name) == hook:
            return getattr(plugin, name)  # type: ignore[no-any-return]
    return None


def _parameters(function: Callable[..., Any]) -> list[str]:
    return [name for name, p in inspect.signature(function).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _spec_argnames(hook: str) -> list[str]:
    from ember.hookspecs import spec_modules

    for module in spec_modules():
        spec = getattr(module, hook, None)
        if spec is not None:
            return list(inspect.signature(spec).parameters)
    raise LookupError(f"no ember hook named {hook!r}")


def forwarders(*plugin_classes: type, skip: frozenset[str]) -> dict[str, Any]:
    """Implementations, for a seed class's namespace, that hand each hook the ``plugin_classes`` implement
    (except those in ``skip``, which the seed class answers through Lightning's methods) to the inner plugin,
    with the same options (wrapper, tryfirst, trylast); a hook the inner plugin of an instance lacks is left
    to the rest of the chain."""
    found: dict[str, dict] = {}
    for plugin_class in plugin_classes:
        for name in dir(plugin_class):
            opts = getattr(inspect.getattr_static(plugin_class, name, None), IMPL_MARK, None)
            if isinstance(opts, dict) and (opts.get("specname") or name) not in skip:
                found.setdefault(opts.get("specname") or name, opts)
    return {f"_ember_{hook}": _forwarder(hook, opts) for hook, opts in found.items()}


def _forwarder(hook: str, opts: dict) -> Any:
    argnames = _spec_argnames(hook)

    def call(self: SeedPlugin, *args: Any) -> Any:
        function = _implementation(self.plugin, hook)
        if function is None:
            return None
        given = dict(zip(argnames, args, strict=True))
        return function(**{name: given[name] for name in _parameters(function) if name in given})

    def wrap(self: SeedPlugin, *args: Any) -> Generator[None, Any, Any]:
        function = _implementation(self.plugin, hook)
        if function is None:
            return (yield)
        given = dict(zip(argnames, args, strict=True))
        return (yield from function(**{name: given[name] for name in _parameters(function) if name in given}))

    forward = wrap if opts.get("wrapper") or opts.get("hookwrapper") else call
    forward.__wrapped__ = _taking(argnames)  # type: ignore[union-attr]  # pluggy reads the names it passes here
    forward.__name__ = forward.__qualname__ = f"_ember_{hook}"
    kept = {k: opts[k] for k in ("wrapper", "hookwrapper", "tryfirst", "trylast", "optionalhook") if opts.get(k)}
    return hookimpl(specname=hook, **kept)(forward)


def _taking(argnames: list[str]) -> Callable[..., None]:
    """A method that takes ``argnames`` (and does nothing): what pluggy reads a forwarder's arguments from, so
    that it passes all of the spec's, by position."""
    def template(self: Any) -> None:
        return None

    names = ("self", *argnames)
    template.__code__ = template.__code__.replace(co_argcount=len(names), co_nlocals=len(names), co_varnames=names)
    template.__qualname__ = "SeedPlugin.forwarder"
    return template


def add_forwarders(cls: type, *plugin_classes: type, skip: frozenset[str]) -> type:
    """Put :func:`forwarders` in ``cls`` (names it defines itself are kept) and return it."""
    for name, function in forwarders(*plugin_classes, skip=skip).items():
        if name not in vars(cls):
            setattr(cls, name, function)
    return cls
