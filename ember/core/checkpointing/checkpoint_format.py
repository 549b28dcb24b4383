"""A checkpoint file's content: plain data only, its format version, and reading it back.

A checkpoint holds tensors, numbers, strings and lists/tuples/dicts of them, so ``torch.load(weights_only=True)``
reads it without running code; :func:`make_plain` checks that before anything is written.
:func:`check_format` accepts what this ember can read (upgrading older formats), and :func:`load_module` is
``Module.load_from_checkpoint``. What goes into a checkpoint, and when, is :mod:`ember.core.checkpointing.checkpoint`'s.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ember.core.errors import CheckpointError

if TYPE_CHECKING:
    from ember.hookspecs import TrainerLike

log = logging.getLogger("ember")

#: The checkpoint format this ember writes; it reads this one and every older one. 2: a plugin's state is kept
#: in ``plugins[key]`` (format 1 also had copies of some callbacks' states in a ``callbacks`` entry). Files of
#: format 2 may also name the callbacks' states ``callbacks[state_key]`` and the DataModule's by its class, as
#: Lightning does (:func:`add_lightning_names`): the same objects as in ``plugins``, which is what is read.
FORMAT_VERSION = 2

# ---------------------------------------------------------------------------------------------------------
# Plain data
# ---------------------------------------------------------------------------------------------------------

#: The types of the plain values that hold no tensor and no other value.
PLAIN_SCALARS = frozenset({str, bytes, int, float, bool, complex, type(None)})
_TORCH_ATOMS = (torch.Tensor, torch.dtype, torch.device)
_SEQUENCES = frozenset({list, tuple, set, frozenset, torch.Size})


class NotPlain(Exception):
    """A value ``torch.load(weights_only=True)`` could not rebuild; ``args[0]`` says where it sits."""


def make_plain(obj: Any, where: str = "checkpoint", tensor: Callable[[torch.Tensor], Any] | None = None) -> Any:
    """``obj`` with NumPy scalars turned into Python numbers (same values), or NotPlain naming the first value a
    weights-only load could not rebuild. Containers are copied only where something changed; with ``tensor``,
    every container is copied and every tensor replaced by ``tensor(it)`` (a snapshot in the same walk)."""
    try:
        return _plain(obj, tensor)
    except _Misplaced as exc:  # the path is spelled only when there is an error to report
        raise NotPlain(where + "".join(f"[{key!r}]" for key in reversed(exc.path)) + f" ({exc.what})") from None


class _Misplaced(Exception):
    def __init__(self, what: str) -> None:
        self.what = what
        self.path: list[Any] = []  # keys and indices, innermost first


def _plain(obj: Any, tensor: Callable[[torch.Tensor], Any] | None) -> Any:
    # Branches in the order of how often a checkpoint's values take them (numbers, dicts, tensors, lists): this
    # walk runs at every save, on the training thread.
    kind = type(obj)
    if kind in PLAIN_SCALARS:
        return obj
    if kind is dict or kind is OrderedDict:
        return _plain_dict(obj, kind, tensor)
    if isinstance(obj, torch.Tensor):
        return obj if tensor is None else tensor(obj)
    if kind in _SEQUENCES:
        values = []
        for i, v in enumerate(obj):
            try:
                values.append(_plain(v, tensor))
            except _Misplaced as exc:
                exc.path.append(i)
                raise
        if tensor is None and all(new is old for new, old in zip(values, obj, strict=True)):
            return obj
        return values if kind is list else kind(values)
    if isinstance(obj, _TORCH_ATOMS):  # dtypes, devices
        return obj
    if kind.__module__ == "numpy" and callable(getattr(obj, "item", None)) and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    raise _Misplaced(f"a {kind.__module__}.{kind.__qualname__}")


def _plain_dict(obj: dict, kind: type, tensor: Callable[[torch.Tensor], Any] | None) -> Any:
    """A dict of :func:`_plain`: checked, itself when nothing changed (a number or a tensor costs no call), else a
    copy; with ``tensor``, always a copy."""
    snapshot = tensor is not None
    copy = kind() if snapshot else None
    for key, value in obj.items():
        if type(key) not in PLAIN_SCALARS:
            raise _Misplaced(f"the key {key!r}, a {type(key).__name__}")
        value_kind = type(value)
        if value_kind in PLAIN_SCALARS or (value_kind is torch.Tensor and not snapshot):
            new = value
        else:
            try:
                new = _plain(value, tensor)
            except _Misplaced as exc:
                exc.path.append(key)
                raise
        if copy is None and new is not value:
            copy = kind(obj)  # what came before, as it is; from here on each value is set again
        if copy is not None:
            copy[key] = new
    if copy is None:
        return obj
    if kind is OrderedDict:
        copy.__dict__.update(vars(obj))  # a state_dict's _metadata
    return copy


def _plain_value(value: Any) -> tuple[bool, Any]:
    try:
        return True, make_plain(value)
    except NotPlain:
        return False, value


def plain_hparams(module: Any, warned: set[str] | None = None) -> dict[str, Any]:
    """The module's ``hparams`` as plain data; a value that is not (a class, a function, ...) is left out
    with a warning, since a weights-only load could not rebuild it."""
    hparams = getattr(module, "hparams", None)
    if not isinstance(hparams, Mapping):
        return {}
    out = {}
    for key, value in hparams.items():
        ok, plain = _plain_value(value)
        if ok:
            out[str(key)] = plain
        elif warned is None or key not in warned:
            if warned is not None:
                warned.add(key)
            from ember.core.hooks.plugin_manager import EmberWarning

            warnings.warn(f"hyperparameter {key!r} ({type(value).__name__}) is not plain data and is left out of "
                          "checkpoints; pass it again to load_from_checkpoint(..., "
                          f"{key}=...) or exclude it with save_hyperparameters(ignore=[{key!r}]).",
                          EmberWarning, stacklevel=4)
    return out


def hparams_entries(objects: Any, warned: set[str] | None = None) -> dict[str, Any]:
    """The checkpoint entries of the hyperparameters of the module and the DataModule (``objects``, None where
    there is none), each under its class's ``CHECKPOINT_HYPER_PARAMS_KEY`` (``hyper_parameters``,
    ``datamodule_hyper_parameters``), with the ``__init__`` argument a single dict or Namespace came in under
    ``CHECKPOINT_HYPER_PARAMS_NAME``. As in Lightning, none for an object without hyperparameters."""
    entries: dict[str, Any] = {}
    for obj in objects:
        hparams = plain_hparams(obj, warned) if obj is not None else None
        if not hparams:
            continue
        entries[getattr(obj, "CHECKPOINT_HYPER_PARAMS_KEY", "hyper_parameters")] = hparams
        name_key = getattr(obj, "CHECKPOINT_HYPER_PARAMS_NAME", None)
        if name_key and "_hparams_name" in vars(obj):
            entries[name_key] = vars(obj)["_hparams_name"]
    return entries


# ---------------------------------------------------------------------------------------------------------
# Lightning's names: the same states, one object under two keys
# ---------------------------------------------------------------------------------------------------------


def add_lightning_names(checkpoint: dict[str, Any], callbacks: Mapping[str, str], datamodule: str | None) -> None:
    """Give the plugin states of ``checkpoint["plugins"]`` Lightning's names as well: ``callbacks[name]`` for
    each ``name: key`` of ``callbacks``, and the DataModule's state under its class name ``datamodule`` (unless an
    entry of ember's has that name). Each is the very dict kept under ``plugins``, not a copy: it is written once
    and loads as one object."""
    states = checkpoint["plugins"]
    checkpoint["callbacks"] = {name: states[key] for name, key in callbacks.items() if key in states}
    if datamodule is not None and "datamodule" in states and datamodule not in checkpoint:
        checkpoint[datamodule] = states["datamodule"]


#: Where :func:`take_names` found a name: (the entry holding it, None for the top level; the name; the key in
#: ``plugins`` of the state it names).
_Names = list[tuple[str | None, str, str]]
_CONTAINERS = frozenset({dict, OrderedDict, list})
#: The top-level entries of ember's own (see :mod:`ember.core.checkpointing.checkpoint`).
_EMBER_ENTRIES = frozenset({"format_version", "ember_version", "kind", "epoch", "global_step", "state_dict",
                            "plugins", "callbacks", "optimizer_states", "lr_schedulers", "loops", "results",
                            "callback_metrics", "rng", "data", "grads"})


def take_names(checkpoint: dict[str, Any]) -> _Names:
    """Take the names of :func:`add_lightning_names` (entries that are the very object of a ``plugins`` state) out of
    ``checkpoint`` before it is checked or copied, which would otherwise walk (and copy) those states twice; an
    entry that a hook put there, another object, stays. :func:`put_names` puts them back."""
    states = checkpoint.get("plugins")
    if type(states) is not dict or not states:
        return []
    # containers only: the identity of a number or string says nothing (small ints are shared objects)
    key_of = {id(state): key for key, state in states.items() if type(state) in _CONTAINERS}
    taken: _Names = []
    callbacks = checkpoint.get("callbacks")
    if type(callbacks) is dict:
        for name, state in list(callbacks.items()):
            key = key_of.get(id(state))
            if key is not None:
                taken.append(("callbacks", name, key))
                del callbacks[name]
    for name in checkpoint.keys() - _EMBER_ENTRIES:  # the DataModule's name is none of ember's own entries
        key = key_of.get(id(checkpoint[name]))
        if key is not None:
            taken.append((None, name, key))
            del checkpoint[name]
    return taken


def put_names(checkpoint: dict[str, Any], taken: _Names) -> None:
    """Put the names :func:`take_names` took back into ``checkpoint`` (it or its checked copy), each naming the
    ``plugins`` state of that checkpoint."""
    states = checkpoint.get("plugins", {})
    for where, name, key in taken:
        (checkpoint if where is None else checkpoint[where])[name] = states[key]


def walk_once(checkpoint: Any, walk: Callable[[Any], Any]) -> Any:
    """``walk(checkpoint)`` (a copy or a check of every container) with the names of :func:`add_lightning_names`
    walked once and naming, in what ``walk`` returns, that result's own ``plugins`` states."""
    if type(checkpoint) is not dict:
        return walk(checkpoint)
    taken = take_names(checkpoint)
    try:
        out = walk(checkpoint)
    finally:
        put_names(checkpoint, taken)
    if out is not checkpoint and type(out) is dict:
        put_names(out, taken)
    return out


# ---------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------


def check_format(checkpoint: Any, path: str, allow_lightning: bool = False) -> dict[str, Any]:
    """``checkpoint`` if it is an ember checkpoint this ember can read, else a CheckpointError naming
    ``path`` and what is wrong."""
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} is not an ember checkpoint: it holds a {type(checkpoint).__name__}, not a "
                              "dict. Load plain tensors with torch.load(path, weights_only=True).")
    version = checkpoint.get("format_version")
    if version is None:
        if "pytorch-lightning_version" in checkpoint or "lightning_version" in checkpoint:
            if allow_lightning and "state_dict" in checkpoint:
                return checkpoint
            raise CheckpointError(f"{path} is a PyTorch Lightning checkpoint, which cannot resume an ember run. Load "
                                  "its weights with YourModule.load_from_checkpoint(path) and start a new fit.")
        if checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
            n = len(checkpoint)
            raise CheckpointError(f"{path} is not an ember checkpoint but a bare state_dict of {n} "
                                  f"tensor{'s' if n != 1 else ''}; load it with "
                                  "model.load_state_dict(torch.load(path, weights_only=True)).")
        keys = ", ".join(sorted(map(str, checkpoint))[:8]) or "none"
        raise CheckpointError(f"{path} is not an ember checkpoint: it has no 'format_version' entry (its keys: "
                              f"{keys}).")
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointError(f"{path} has an invalid format_version {version!r}: the file is damaged.")
    if version > FORMAT_VERSION:
        from ember.version import __version__

        written = checkpoint.get("ember_version", "a newer ember")
        raise CheckpointError(f"{path} was written in checkpoint format {version} (by ember {written}); this ember "
                              f"({__version__}) reads formats up to {FORMAT_VERSION}. Upgrade ember to load it.")
    if version < 2:
        _upgrade_from_1(checkpoint)
    return checkpoint


def _upgrade_from_1(checkpoint: dict[str, Any]) -> None:
    """Format 1 -> 2: the callback states format 1 also kept in a ``callbacks`` entry (EarlyStopping under
    ``identity[monitor]``, its key now, and Timer under its identity) move to ``plugins``; a state already
    under ``plugins`` wins."""
    legacy = checkpoint.pop("callbacks", None)
    if not isinstance(legacy, dict):
        return
    plugins = checkpoint.setdefault("plugins", {})
    for key, state in legacy.items():
        plugins.setdefault(key, state)


def storage_manager(checkpoint_io: Any = "torch") -> Any:
    """A plugin manager holding only a checkpoint-storage plugin, for loading outside a run."""
    from ember.core.hooks import discovery
    from ember.core.hooks.plugin_manager import PluginManager

    pm = PluginManager()
    if isinstance(checkpoint_io, str):
        info = discovery.discover().lookup("checkpoint_io", checkpoint_io)
        pm.register(info.load(), name=info.identity, origin=info.dist)
    else:
        pm.register(checkpoint_io, name=getattr(checkpoint_io, "identity", "checkpoint_io.custom"))
    return pm


def read(pm: Any, trainer: TrainerLike | None, path: str, weights_only: bool) -> Any:
    """Read ``path`` through the storage role of ``pm``."""
    from ember.core.checkpointing.async_writer import flush_all
    from ember.core.hooks.dispatch import HookTable

    flush_all()  # a file still being written in the background is read complete
    checkpoint = HookTable(pm).call("load_checkpoint", trainer=trainer, path=path, weights_only=weights_only)
    if checkpoint is None:
        raise CheckpointError(f"cannot read {path}: no checkpoint-storage plugin answered load_checkpoint; "
                              "select one with Trainer(checkpoint_io='torch').")
    return checkpoint


# ---------------------------------------------------------------------------------------------------------
# Weights: where they came from, and whether a checkpoint's fit the module
# ---------------------------------------------------------------------------------------------------------

#: Where a module's weights came from (``"fit"`` or a checkpoint path) in this process.
_weights_of: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def note_weights(module: Any, origin: str) -> None:
    """Remember that ``module``'s weights come from ``origin`` (a fit, or a checkpoint file)."""
    with contextlib.suppress(TypeError):  # a module that cannot be weakly referenced is simply not remembered
        _weights_of[module] = origin


def weights_known(module: Any) -> bool:
    """True when ``module`` was fit by a TrainerLike or loaded from a checkpoint in this process."""
    try:
        return module in _weights_of
    except TypeError:
        return False


def run_of(path: str) -> str:
    """The run folder a checkpoint file belongs to: the folder above ``checkpoints/``, else the file's folder."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else folder


_SHOWN = 5  # mismatched names listed per kind


def _listed(names: list[str]) -> str:
    more = f", ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else ""
    return ", ".join(repr(n) for n in names[:_SHOWN]) + more


def check_weights(module: Any, state: Mapping[str, Any], path: str, checkpoint: Mapping[str, Any] | None = None,
                  strict: bool = True, hint: str = "") -> None:
    """A CheckpointError, before anything is loaded, when ``state`` holds the weights of another model: names
    missing or unexpected (with ``strict``) and shapes that differ, a few of each listed with their counts, and
    the run the checkpoint comes from."""
    own = module.state_dict()
    shapes = []
    for name, mine in own.items():
        theirs = state.get(name)
        if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor) and \
                not torch.nn.parameter.is_lazy(mine) and mine.shape != theirs.shape:
            shapes.append(f"{name!r}: {tuple(theirs.shape)} in the checkpoint, {tuple(mine.shape)} in the model")
    missing = [n for n in own if n not in state] if strict else []
    unexpected = [n for n in state if n not in own] if strict else []
    if not (shapes or missing or unexpected):
        return
    parts = []
    if shapes:
        more = f"; ... ({len(shapes) - _SHOWN} more)" if len(shapes) > _SHOWN else ""
        parts.append(f"{len(shapes)} with another shape ({'; '.join(shapes[:_SHOWN])}{more})")
    if missing:
        parts.append(f"{len(missing)} of the model's missing from the checkpoint ({_listed(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} in the checkpoint that the model lacks ({_listed(unexpected)})")
    where = ""
    if checkpoint is not None and "global_step" in checkpoint:
        where = f", written at global step {checkpoint.get('global_step')}"
    raise CheckpointError(
        f"{path} holds the weights of another model than this {type(module).__name__}: of its "
        f"{len(state)} entries, {', '.join(parts)}. The checkpoint comes from the run {run_of(path)}{where}. "
        + (hint + " " if hint else "")
        + "Load a checkpoint of this model, or build the model with the arguments it was trained with (the run "
          "folder's hparams.yaml, where a logger wrote one).")


class BuildError(CheckpointError, TypeError):
    """The saved hyperparameters (and the keywords given) do not build the class: its ``__init__`` refused them."""


#: Where checkpoints of old Lightning versions kept a module's hyperparameters.
_PAST_HPARAMS_KEYS = ("hparams", "module_arguments")


def build_from_hparams(cls: type, checkpoint: Mapping[str, Any], path: str, overrides: dict[str, Any]) -> Any:
    """``cls`` built from the hyperparameters saved in ``checkpoint`` under the class's keys, ``overrides`` winning:
    a single dict or Namespace argument is passed as that argument again (the ``hparams_name`` entry), and names
    the class's ``__init__`` does not take are dropped unless it takes ``**kwargs``."""
    key = getattr(cls, "CHECKPOINT_HYPER_PARAMS_KEY", "hyper_parameters")
    loaded: dict[str, Any] = {}
    if key == "hyper_parameters":
        for past in _PAST_HPARAMS_KEYS:
            if isinstance(checkpoint.get(past), Mapping):
                loaded.update(checkpoint[past])
    loaded.update(checkpoint.get(key) or {})
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    named = [n for i, (n, p) in enumerate(params.items())
             if i > 0 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    as_one = checkpoint.get(getattr(cls, "CHECKPOINT_HYPER_PARAMS_NAME", "hparams_name"))
    kwargs: dict[str, Any] = {as_one: loaded} if as_one and as_one in named else dict(loaded)
    kwargs.update(overrides)
    if not takes_any:
        kwargs = {k: v for k, v in kwargs.items() if k in named}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise BuildError(f"could not build {cls.__name__}(**{sorted(kwargs)}) from {path}: {exc}. The "
                         "checkpoint's hyperparameters come from save_hyperparameters(); pass missing or "
                         "renamed arguments to load_from_checkpoint as keywords.") from exc


def load_datamodule(cls: type, path: str | os.PathLike, weights_only: bool = True, checkpoint_io: Any = "torch",
                    **overrides: Any) -> Any:
    """``DataModule.load_from_checkpoint``: ``cls`` built from the DataModule's saved hyperparameters
    (``overrides`` win), its ``load_state_dict`` given the state the checkpoint keeps for it."""
    path = os.fspath(path)
    checkpoint = check_format(read(storage_manager(checkpoint_io), None, path, weights_only), path,
                              allow_lightning=True)
    datamodule = build_from_hparams(cls, checkpoint, path, overrides)
    plugins = checkpoint.get("plugins")
    state = plugins.get("datamodule") if isinstance(plugins, Mapping) else None
    state = checkpoint.get(cls.__qualname__, state)
    if state:
        datamodule.load_state_dict(state)
    return datamodule


def load_module(cls: type, path: str | os.PathLike, map_location: Any = None, strict: bool | None = True,
                weights_only: bool = True, checkpoint_io: Any = "torch", **overrides: Any) -> Any:
    """``Module.load_from_checkpoint``: build ``cls`` from the saved hyperparameters (``overrides`` win),
    call the module's ``on_load_checkpoint`` (which may change ``checkpoint["state_dict"]``), load the weights."""
    path = os.fspath(path)
    checkpoint = check_format(read(storage_manager(checkpoint_io), None, path, weights_only), path,
                              allow_lightning=True)
    module = build_from_hparams(cls, checkpoint, path, overrides)
    on_load = getattr(module, "on_load_checkpoint", None)
    if callable(on_load):
        on_load(checkpoint)
    state = checkpoint.get("state_dict")
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path} has no 'state_dict' entry with the module's weights.")
    if strict is None:  # the module's own choice (LightningModule.strict_loading), True by default
        strict = getattr(module, "strict_loading", True) is not False
    check_weights(module, state, path, checkpoint, strict=strict)
    module.load_state_dict(state, strict=strict)
    note_weights(module, path)
    if isinstance(map_location, (str, torch.device)):
        module.to(map_location)
    return module


#: Optimizer flags that choose an implementation, not the algorithm; torch adds new ones over versions.
_OPTIMIZER_SWITCHES = {"foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay"}


def check_optimizer_state(index: int, optimizer: Any, state: Any, path: str | None) -> None:
    """A CheckpointError, before anything is loaded, when ``state`` cannot be this optimizer's: other parameter
    groups, other group sizes, or another kind of optimizer (torch would fail later, or silently misbehave)."""
    name = type(optimizer).__name__
    groups = state.get("param_groups") if isinstance(state, Mapping) else None
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise CheckpointError(f"{path}: the state of optimizer {index} has no parameter groups: it is damaged.")
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(f"{path}: optimizer {index} ({name}) has {len(optimizer.param_groups)} parameter "
                              f"group(s) in this run, {len(groups)} in the checkpoint. configure_optimizers() must "
                              "build the groups it built when the checkpoint was written.")
    for g, (saved, current) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        # Schedulers and averaging add their own keys to a group (initial_lr, swa_lr): only settings this run's
        # optimizer has and the saved group lacks tell another kind of optimizer (torch's on/off switches aside,
        # which newer torch versions add and fill in on load).
        missing = sorted(set(optimizer.defaults) - set(saved) - _OPTIMIZER_SWITCHES)
        if missing:
            raise CheckpointError(
                f"{path}: parameter group {g} of optimizer {index} was saved without the settings {missing}, which "
                f"this run's {name} has: configure_optimizers() returns another kind of optimizer than when the "
                "checkpoint was written (e.g. SGD then, Adam now). Resume with the same optimizer, or load only the "
                "weights (Module.load_from_checkpoint) and start a new fit.")
        if len(saved.get("params", ())) != len(current["params"]):
            raise CheckpointError(f"{path}: parameter group {g} of optimizer {index} ({name}) holds "
                                  f"{len(current['params'])} parameters in this run, {len(saved.get('params', ()))} "
                                  "in the checkpoint: the model or its parameter groups changed.")
