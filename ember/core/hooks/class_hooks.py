"""What a plugin's class offers as hook implementations, read once per class (registering a run's plugins asks
about every attribute of each: an ``nn.Module`` has hundreds), and the static checks on plugin objects."""

from __future__ import annotations

import inspect
import itertools
import types
from typing import Any

from ember.core.errors import suggest
from ember.core.hooks.positional import is_base_hook
from ember.hookspecs import PROJECT
from ember.hookspecs import events as _events


def _spec_names(module: Any) -> frozenset[str]:
    return frozenset(
        name for name, fn in vars(module).items() if callable(fn) and hasattr(fn, PROJECT + "_spec")
    )


#: Hooks that a plain method with the hook's name implements (Lightning's callback/module convention).
EVENT_HOOKS = _spec_names(_events)
#: LightningModule hooks ember does not call: a module that overrides one is warned at registration.
NOT_CALLED = frozenset({"on_predict_model_train", "configure_sharded_model"})
#: The attribute ``@ember.hookimpl`` sets on a function: its options.
IMPL_MARK = PROJECT + "_impl"
_MISSING = object()
#: How parse_hookimpl_opts answers for an attribute found in a plugin's class (see ClassHooks).
NONE, PLAIN, MARKED, FULL = "none", "plain", "marked", "full"


class ClassHooks:
    """What registering an instance finds in its class, read once per class. For each attribute name: no hook
    (``NONE``: most of an ``nn.Module``'s hundreds), a method named like an event hook without a marker
    (``PLAIN``), a function marked ``@hookimpl`` (``MARKED``), or one that needs the whole look (``FULL``: a
    slot, a static or class method, anything unusual). Also the names the registration checks warn about.

    It is used only while it is still true: :meth:`current` compares the class's MRO and every class ``__dict__``
    on it with a copy taken when it was read (a method added, replaced or deleted anywhere shows), and checks
    that no function has been marked, unmarked or given other options in place since.
    """

    __slots__ = ("functions", "kinds", "marked", "misspelled", "mro", "not_called", "snapshot", "unmarked")

    def __init__(self, cls: type) -> None:
        self.mro = cls.__mro__
        self.snapshot = tuple(dict(vars(klass)) for klass in self.mro)
        self.kinds: dict[str, str] = {}
        #: Each function marked ``@hookimpl``, with its options (the marker's own dict, as pluggy reads it).
        self.marked: dict[str, tuple[types.FunctionType, dict]] = {}
        #: The function of each ``PLAIN`` and ``MARKED`` name.
        self.functions: dict[str, types.FunctionType] = {}
        unmarked: list[Any] = []
        names = dir(cls)
        for name in names:
            value = next((d[name] for d in self.snapshot if name in d), _MISSING)
            if value is not _MISSING:  # else a name from the class's own __dir__: left to the whole look
                self.kinds[name] = kind = self._kind(name, value, unmarked)
                if isinstance(value, types.FunctionType) and (kind is PLAIN or kind is MARKED):
                    self.functions[name] = value
        self.unmarked = tuple(unmarked)
        self.not_called = tuple(name for name in names if name in NOT_CALLED)
        self.misspelled = tuple((name, close) for name in names
                                if name.startswith("on_") and name not in EVENT_HOOKS and name not in NOT_CALLED
                                for close in [suggest(name, EVENT_HOOKS)] if close)

    def _kind(self, name: str, value: Any, unmarked: list[Any]) -> str:
        if isinstance(value, types.FunctionType):
            opts = getattr(value, IMPL_MARK, None)
            if opts is None:
                unmarked.append(value)
                if name not in EVENT_HOOKS or is_base_hook(value):
                    return NONE
                return PLAIN
            if isinstance(opts, dict):
                self.marked[name] = (value, opts)
                return MARKED
            return FULL
        if isinstance(value, (staticmethod, classmethod, types.MethodType)):
            function = value.__func__
            if (isinstance(function, types.FunctionType) and name not in EVENT_HOOKS
                    and getattr(value, IMPL_MARK, None) is None and getattr(function, IMPL_MARK, None) is None):
                unmarked.extend((value, function))
                return NONE
            return FULL
        if isinstance(value, types.MemberDescriptorType) or (name in EVENT_HOOKS and callable(value)):
            return FULL
        return NONE

    def current(self, cls: type) -> bool:
        try:
            # by identity: a replaced attribute is a change even where it compares equal, and == is not asked of
            # what a test put there (a mock records the comparison as a call)
            same = cls.__mro__ == self.mro and all(map(_same_objects, map(vars, self.mro), self.snapshot))
        except Exception:  # a replaced class attribute whose == answers no bool (an array): read the class again
            return False
        return (same and not any(map(hasattr, self.unmarked, itertools.repeat(IMPL_MARK)))
                and all(getattr(function, IMPL_MARK, None) is opts for function, opts in self.marked.values()))


def _same_objects(now: Any, before: Any) -> bool:
    """The class namespace ``now`` holds the very objects ``before`` held, under the same names."""
    return now.keys() == before.keys() and all(value is before[name] for name, value in now.items())


#: The classes read. Bounded (emptied when full) rather than weak: an entry's copy of its class's methods refers
#: back to the class (through ``super()``'s cell), which would keep a weakly keyed entry alive for ever.
_cache: dict[type, ClassHooks] = {}
_KEPT = 256


def class_hooks(cls: type) -> ClassHooks:
    """What ``cls`` offers: read again when the class changed since it was last read."""
    found = _cache.get(cls)
    if found is None or not found.current(cls):
        if len(_cache) >= _KEPT:
            _cache.clear()
        found = _cache[cls] = ClassHooks(cls)
    return found


def may_be_marked(plugin: Any, name: str) -> bool:
    """False when ``plugin.name`` surely carries no ``@hookimpl`` marker; True when it may (pluggy decides).

    A fast static lookup for instances (their ``__dict__``, then the class's MRO), which is what registering
    a module with its hundreds of ``nn.Module`` attributes spends most of its time on otherwise. Classes and
    modules registered as plugins, instance attributes and slots are left to pluggy.
    """
    if isinstance(plugin, (type, types.ModuleType)):
        return True
    try:
        if name in object.__getattribute__(plugin, "__dict__"):
            return True
    except AttributeError:
        pass
    for klass in type(plugin).__mro__:
        value = vars(klass).get(name, _MISSING)
        if value is _MISSING:
            continue
        if isinstance(value, (staticmethod, classmethod, types.MethodType)):
            return getattr(value, IMPL_MARK, None) is not None or \
                getattr(value.__func__, IMPL_MARK, None) is not None
        if isinstance(value, types.FunctionType):
            return getattr(value, IMPL_MARK, None) is not None
        return isinstance(value, types.MemberDescriptorType)
    return False


def implemented_hooks(plugin: Any) -> list[str]:
    """The attribute names of ``plugin`` that registering it would make hook implementations: methods named like
    an event hook, and attributes marked with ``@ember.hookimpl``. Nothing is registered or called."""
    found = []
    for name in dir(plugin):
        if name not in EVENT_HOOKS and not may_be_marked(plugin, name):
            continue
        try:
            attr = inspect.getattr_static(plugin, name)
        except AttributeError:
            continue
        function = getattr(attr, "__func__", attr)
        if getattr(attr, IMPL_MARK, None) is not None or getattr(function, IMPL_MARK, None) is not None:
            found.append(name)
        elif name in EVENT_HOOKS and (callable(attr) or isinstance(attr, (staticmethod, classmethod))):
            found.append(name)
    return found


def misspelled_hooks(plugin: Any) -> list[tuple[str, str]]:
    """``(name, " Did you mean 'hook'?")`` for each attribute of ``plugin``'s class named almost like an event hook
    (``on_train_epoch_ned``): such a method is never called."""
    return list(class_hooks(type(plugin)).misspelled)
