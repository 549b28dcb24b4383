"""``save_hyperparameters`` and ``hparams``: the part of ``ember.Module`` and ``ember.DataModule`` that remembers
the ``__init__`` arguments, for checkpoints (``load_from_checkpoint`` builds the object again from them) and for
the loggers. Behaves as LightningModule's: every ``__init__`` on the way from the outermost constructor of an
object of this family to the call is read (a subclass's values win over its base's, and a container object
built inside another's ``__init__`` sees the outer arguments too); a single dict or ``Namespace`` argument becomes
the hyperparameters themselves and is rebuilt as that one argument."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from argparse import Namespace
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

#: Values that cannot be the hyperparameters by themselves (``save_hyperparameters(3)``).
_PRIMITIVES = (bool, int, float, str)


class AttributeDict(dict):
    """A dict whose keys are also attributes (``self.hparams.lr``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(f"no hyperparameter {key!r}; saved: {sorted(self)}") from exc

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def _frame_arguments(frame: Any) -> dict[str, Any]:
    """The parameters of one ``__init__`` call as they are now (a parameter reassigned in the body shows its new
    value), the contents of its ``**kwargs`` spread out; ``self``, ``*args`` and ``**kwargs`` themselves left out."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    varargs = code.co_flags & inspect.CO_VARARGS
    varkw = code.co_varnames[count + (1 if varargs else 0)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    local = frame.f_locals
    values = {n: local[n] for n in names[1:] if n in local}
    if varkw is not None and isinstance(local.get(varkw), Mapping):
        values.update(local[varkw])
    return values


def _init_frames(caller: Any) -> list[Any]:
    """The ``__init__`` frames of hyperparameter-keeping objects from ``caller`` outwards, innermost first: the
    chain of ``super().__init__`` calls, and the ``__init__`` of an object that built this one in its own.
    A frame that is no such ``__init__`` ends the walk once one was found (before that, it is skipped: a
    dataclass's ``__post_init__`` is called from its generated ``__init__``)."""
    frames: list[Any] = []
    frame = caller
    while frame is not None and frame.f_back is not None:
        code = frame.f_code
        this = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
        is_init = code.co_name == "__init__"
        if isinstance(this, HyperparametersMixin) and (is_init or "__class__" in frame.f_locals):
            if is_init:
                frames.append(frame)
        elif frames:
            break
        frame = frame.f_back
    return frames


def init_arguments(obj: Any, caller: Any) -> dict[str, Any]:
    """The arguments ``save_hyperparameters()`` called in ``caller`` reads: a dataclass's ``init`` fields, or
    those of every ``__init__`` of :func:`_init_frames` (the outer ones win)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    values: dict[str, Any] = {}
    for frame in _init_frames(caller):
        values.update(_frame_arguments(frame))
    return values


def hparams_of_caller(caller: Any, args: tuple[Any, ...], ignore: str | list[str] | None) -> dict[str, Any]:
    """The hyperparameters ``save_hyperparameters(*args, ignore=...)`` called in the frame ``caller`` stores, as
    a dict (a single mapping or ``Namespace`` given is read as one)."""
    holder = _Holder()
    _save(holder, caller, args, ignore)
    return dict(holder.hparams)


def _ignored(ignore: Any) -> set[str]:
    if ignore is None:
        return set()
    if isinstance(ignore, str):
        return {ignore}
    return {name for name in ignore if isinstance(name, str)}


def _as_hparams(value: Any) -> Any:
    """``value`` as the object ``hparams`` becomes: a mapping's items in an :class:`AttributeDict`."""
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return AttributeDict(value)
    if isinstance(value, _PRIMITIVES):
        raise ValueError(f"Primitives {_PRIMITIVES} are not allowed as save_hyperparameters({value!r}): pass "
                         "a dict, a Namespace, or the names of __init__ arguments as strings.")
    if not isinstance(value, MutableMapping):
        raise ValueError(f"save_hyperparameters() cannot keep a {type(value).__name__}: pass a dict, a Namespace, "
                         "or the names of __init__ arguments as strings.")
    return value


def _save(obj: Any, caller: Any, args: tuple[Any, ...], ignore: Any) -> None:
    if len(args) == 1 and not isinstance(args[0], str) and not args[0]:
        return  # an empty container: nothing to keep
    ignored = _ignored(ignore)
    given = {k: v for k, v in init_arguments(obj, caller).items() if k not in ignored}
    objects = [a for a in args if not isinstance(a, str)]
    if not args:
        hp: Any = given
        name = "kwargs" if given else None
    elif len(objects) == 1:
        hp = objects[0]
        name = next((k for k, v in given.items() if v is hp), None)
        if name is None:
            name = next((k for k, v in given.items() if _equal(v, hp)), None)
    else:
        hp = {a: given[a] for a in args if isinstance(a, str) and a in given}
        name = "kwargs"
    hp = _as_hparams(hp)
    current = obj.__dict__.get("_hparams")
    if isinstance(hp, dict) and isinstance(current, dict):
        current.update(hp)
    else:
        obj.__dict__["_hparams"] = hp
    hparams = obj.__dict__["_hparams"]
    for key in ignored:  # a subclass's ignore also drops what a base class kept
        hparams.pop(key, None)
    for key, value in hparams.items():
        if isinstance(value, torch.nn.Module):
            warnings.warn(f"Hyperparameter {key!r} is an instance of `nn.Module` and is already saved with the "
                          f"module's weights; leave it out with `self.save_hyperparameters(ignore=[{key!r}])`.",
                          UserWarning, stacklevel=4)
    obj.__dict__["_hparams_name"] = name
    obj.__dict__["_hparams_initial"] = copy.deepcopy(hparams)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


class HyperparametersMixin:
    """``hparams`` and ``save_hyperparameters``, shared by :class:`ember.Module` and ``ember.DataModule``."""

    #: Where a checkpoint keeps the hyperparameters (``checkpoint["hyper_parameters"]``), by Lightning's name.
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    #: The ``__init__`` argument that a single dict or ``Namespace`` of hyperparameters came in ("kwargs": each).
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    #: The type of the hyperparameters object, where it is not a dict.
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    @property
    def hparams(self) -> Any:
        return self.__dict__.setdefault("_hparams", AttributeDict())

    def save_hyperparameters(self, *args: Any, ignore: str | list[str] | tuple[str, ...] | None = None,
                             frame: Any = None, logger: bool = True) -> None:
        """Store the ``__init__`` arguments of the caller in ``self.hparams`` (all of them, or those named, or the
        contents of one dict/``Namespace`` argument).

        ``ignore`` removes names (also ones a base class's call kept). Saved in checkpoints and passed to
        loggers' ``log_hyperparams`` (``logger=False``: not passed to loggers). A ``torch.nn.Module`` argument is
        kept with a warning (its weights are in the checkpoint already).
        """
        self.__dict__["_log_hyperparams"] = logger
        if frame is None:
            current = inspect.currentframe()
            assert current is not None and current.f_back is not None
            frame = current.f_back
        _save(self, frame, args, ignore)

    def remove_ignored_hparams(self, ignore_list: list[str]) -> None:
        """Drop these names from ``hparams``."""
        for key in ignore_list:
            self.hparams.pop(key, None)

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of ``hparams`` as ``save_hyperparameters`` stored them (later changes to ``hparams`` do not show
        here); empty before it is called."""
        return AttributeDict(copy.deepcopy(dict(self.__dict__.get("_hparams_initial", {}))))


class _Holder(HyperparametersMixin):
    """Receives what :func:`hparams_of_caller` computes."""
