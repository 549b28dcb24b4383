"""Hooks taken by position: Lightning's convention for callbacks and module hooks.

A plugin's hook implementation receives the spec's arguments by name. Lightning passes them by position
instead: a ``Callback`` method is ``(self, trainer, pl_module, ...)`` whatever its parameters are called, and a
``LightningModule`` hook leaves out the trainer and the module (``on_train_batch_end(self, outputs, batch,
batch_idx)``). Objects that follow that convention (subclasses of :class:`ember.Callback`, and the module and
DataModule of a run) have each unmarked event method matched to the spec by position when its names do not
already match it.

pluggy passes an implementation's arguments positionally, in the order of the parameter names it reads from
the function (following ``__wrapped__``, as it does for decorated functions). A matched method is therefore
registered through pluggy's own ``register()`` as :func:`spec_named` of it: a copy of the function sharing its
code, closure and defaults, whose ``__wrapped__`` names the spec arguments that fill its positions. The user's
code runs directly, with no adapter frame, and a debugger shows its own parameter names.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

import pluggy

#: The class attribute that asks for positional matching: "callback" (trainer and module first) or "module".
STYLE_ATTR = "_ember_hook_style"
#: Marks a base class's no-op hook: never registered, so a hook nobody overrides costs nothing.
BASE_HOOK_MARK = "_ember_base_hook"
#: Spec arguments a module-style hook does not receive.
_NOT_FOR_MODULES = ("trainer", "module")


def base_hook(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``function`` as a base class's no-op hook (see :data:`BASE_HOOK_MARK`)."""
    setattr(function, BASE_HOOK_MARK, True)
    return function


def is_base_hook(attr: Any) -> bool:
    """True for a base no-op hook as found by ``inspect.getattr_static`` (a function or a staticmethod)."""
    return getattr(getattr(attr, "__func__", attr), BASE_HOOK_MARK, False) is True


def defines(obj: Any, name: str) -> bool:
    """Whether ``obj`` has a ``name`` of its own to call: a callable that is not a base class's placeholder
    (:func:`base_hook`). A wrapper set on the instance counts as what it wraps (``functools.wraps``/
    ``update_wrapper``, ``functools.partial``, ``Mock(wraps=...)``; a bare ``Mock`` wraps nothing), as Lightning
    decides whether a hook is overridden. Read while a run sets up, never per batch."""
    attr = getattr(obj, name, None)
    if not callable(attr):
        return False
    attr = getattr(attr, "__wrapped__", attr)
    own = getattr(attr, "__dict__", None)
    if isinstance(own, dict) and "_mock_wraps" in own:  # a unittest.mock object (not imported here: it is slow)
        attr = own["_mock_wraps"]
    elif isinstance(attr, functools.partial):
        attr = attr.func
    return attr is not None and not is_base_hook(attr)


def style_of(plugin: Any, name: str | None) -> str | None:
    """"callback", "module" or None (arguments by name) for a plugin registered under ``name``."""
    style = getattr(type(plugin), STYLE_ATTR, None)
    if style is None and name in ("module", "datamodule"):
        style = "module"
    return style if style in ("callback", "module") else None


def positional_argnames(function: Callable[..., Any], spec_argnames: Sequence[str], style: str,
                        where: str) -> tuple[str, ...] | None:
    """The spec names to pass to ``function``'s positions, or None when its parameter names already match the
    spec (pluggy's matching by name then does the same thing). Raises ``TypeError`` naming ``where`` when the
    method needs more positions than Lightning passes."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in positional]
    passed = list(spec_argnames) if style == "callback" else [a for a in spec_argnames if a not in _NOT_FOR_MODULES]
    star = any(p.kind is p.VAR_POSITIONAL for p in params)
    if style == "callback":
        if names == list(spec_argnames[:len(names)]) and not star:
            return None
    elif set(names) <= set(spec_argnames) and not star:
        return None  # a module hook that names its arguments like the spec (ember's own convention)
    if star:
        return tuple(passed)
    required = [p for p in positional if p.default is p.empty]
    if len(required) > len(passed):
        shown = ", ".join(("pl_module" if a == "module" else a) for a in passed)
        raise TypeError(f"{where}({', '.join(names)}) takes {len(required)} positional arguments, but the hook passes "
                        f"{len(passed)}: ({shown}).")
    return tuple(passed[:len(names)])


#: Batch hooks of the evaluation stages, whose last argument is the dataloader index.
_INDEX_LAST = frozenset(f"on_{stage}_batch_{end}" for stage in ("validation", "test", "predict")
                        for end in ("start", "end"))


class _IndexWhenSeveral:
    """A hook taking its arguments by position is called as Lightning calls it: the dataloader index is passed
    only while the stage runs several loaders (a method that names the parameter ``dataloader_idx`` gets it
    always, as its default would give it). The trainer says how many loaders run; it is passed on only where the
    method takes it."""

    __slots__ = ("target", "with_trainer")

    def __init__(self, target: Callable[..., Any], with_trainer: bool) -> None:
        self.target, self.with_trainer = target, with_trainer

    def __call__(self, trainer: Any, *args: Any) -> Any:
        if trainer.loop.log_context.num_dataloaders <= 1:
            args = args[:-1]
        return self.target(trainer, *args) if self.with_trainer else self.target(*args)


def index_when_several(function: Callable[..., Any], argnames: tuple[str, ...],
                       hook: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
    """``function``, matched by position to ``argnames``, and the spec names to pass it: adapted by
    :class:`_IndexWhenSeveral` where ``hook`` is an evaluation batch hook whose index ``function`` takes."""
    if hook not in _INDEX_LAST or not argnames or argnames[-1] != "dataloader_idx":
        return function, argnames
    with_trainer = argnames[0] == "trainer"
    return _IndexWhenSeveral(function, with_trainer), argnames if with_trainer else ("trainer", *argnames)


@functools.cache
def _signature_of(argnames: tuple[str, ...]) -> Callable[..., None]:
    """A method that does nothing and takes ``argnames`` (pluggy reads an implementation's names from it)."""
    def template(self: Any) -> None:
        return None

    names = ("self", *argnames)
    template.__code__ = template.__code__.replace(co_argcount=len(names), co_nlocals=len(names), co_varnames=names)
    template.__qualname__ = "Positional.hook"
    return template


#: Hooks whose last argument Lightning passes by keyword (``callback.setup(trainer, pl_module, stage="fit")``).
BY_KEYWORD = {"setup": "stage", "teardown": "stage"}


def _call_target(target: Any, *args: Any, **kwargs: Any) -> Any:
    return target(*args, **kwargs)


def _call_with_keyword(target: tuple[Any, str], *args: Any) -> Any:
    function, keyword = target
    return function(*args[:-1], **{keyword: args[-1]})


def _takes_keyword(method: Any, keyword: str) -> bool:
    """Whether ``method`` can take ``keyword`` by name (a parameter of that name, or ``**kwargs``)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == keyword and p.kind is not p.POSITIONAL_ONLY) for p in params)


def spec_named(method: Any, argnames: tuple[str, ...], hook: str | None = None) -> Callable[..., Any] | None:
    """``method`` (a function, or one bound to an object) as pluggy reads one taking ``argnames``: a copy of the
    function with the same code, globals, closure and defaults, whose ``__wrapped__`` has the spec names, bound
    as ``method`` was; another callable object (a ``functools.partial``) is called through a bound function.
    Where Lightning passes ``hook``'s last argument by keyword (:data:`BY_KEYWORD`) and ``method`` can take it so,
    it is passed so too (a wrapper or a mock that records the call sees Lightning's call)."""
    keyword = BY_KEYWORD.get(hook or "")
    if keyword is not None and argnames and argnames[-1] == keyword and _takes_keyword(method, keyword):
        method = types.MethodType(_call_with_keyword, (method, keyword))  # once per run: setup and teardown
    elif not isinstance(method, (types.MethodType, types.FunctionType)) and callable(method):
        method = types.MethodType(_call_target, method)  # a partial or other callable object: called through this
    bound = isinstance(method, types.MethodType)
    function = method.__func__ if bound else method
    if not isinstance(function, types.FunctionType):
        return None
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__,
                              function.__closure__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__, copy.__module__ = function.__qualname__, function.__module__
    copy.__dict__.update(function.__dict__)
    copy.__wrapped__ = _signature_of(argnames)  # type: ignore[attr-defined]
    return types.MethodType(copy, method.__self__) if bound else copy


def same_call(impl: pluggy.HookImpl, function: Callable[..., Any]) -> pluggy.HookImpl:
    """A copy of ``impl`` calling ``function`` with the same arguments (for wrappers that guard or time it)."""
    copy = pluggy.HookImpl(impl.plugin, impl.plugin_name, function, impl.opts)
    copy.argnames, copy.kwargnames = impl.argnames, impl.kwargnames  # type: ignore[misc]  # (see above)
    return copy


def add_base_hooks(cls: type, names: Sequence[str]) -> None:
    """Give ``cls`` a no-op method for every hook in ``names`` that it does not define, so that an override may
    call ``super().<hook>(...)``. They are marked with :func:`base_hook`, so none is ever registered."""
    for name in names:
        if name in vars(cls):
            continue

        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            return None

        hook.__name__ = hook.__qualname__ = name
        hook.__doc__ = f"The ``{name}`` hook: does nothing unless overridden."
        setattr(cls, name, base_hook(hook))
