"""The methods Lightning lets a module override, honoured with Lightning's arguments and order.

``ember.Module`` defines each with Lightning's default behaviour (marked as a base method); a module whose
class defines its own is found by :func:`overrides_of`, once per fit, and then:

* ``optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)`` replaces the optimizer step of the batch
  that ends an accumulation window (:func:`ember.core.loop.optim.batch_with_optimizer_step`); the closure runs
  ``training_step``, ``zero_grad`` (first batch of a window) and ``backward``, and ``optimizer.step(closure=...)`` runs it, then
  unscaling, ``on_before_optimizer_step``, clipping and the step. ``global_step`` counts the call, as in
  Lightning, whether or not the override stepped;
* ``optimizer_zero_grad(epoch, batch_idx, optimizer)``, ``transfer_batch_to_device(batch, device,
  dataloader_idx)`` (the DataModule's, when it has one) and ``backward(loss)`` answer the ``zero_grad``,
  ``batch_to_device`` and ``backward`` role hooks through a small plugin registered next to the module
  (:func:`role_answers`);
* ``configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)`` is called before every
  automatic optimizer step in place of the Trainer's clipping, and ``lr_scheduler_step(scheduler, metric)`` in
  place of ``scheduler.step()``;
* ``configure_callbacks()`` adds callbacks to each run, replacing the Trainer's callbacks of the same type.

An override the run will not call is named in an :class:`~ember.EmberWarning`, never ignored in silence. A plain
``nn.Module``'s ``backward`` method is not taken for the hook (the name is common); ``ember.Module``'s is.
"""

from __future__ import annotations

import inspect
import types
import warnings
from typing import Any

import torch

from ember.core.errors import ConfigurationError
from ember.core.hooks.plugin_manager import EmberWarning
from ember.core.hooks.positional import STYLE_ATTR, defines, is_base_hook
from ember.hookspecs import hookimpl

#: The overridable methods the loop calls itself.
LOOP_METHODS = ("optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "configure_gradient_clipping",
                "backward", "transfer_batch_to_device")
_OPTIMIZATION = ("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping", "lr_scheduler_step")


def overridden(module: Any, name: str) -> Any:
    """The bound method ``name`` when the module's class defines its own (not ``ember.Module``'s), else None."""
    try:
        own = object.__getattribute__(module, "__dict__")
    except AttributeError:
        own = None
    if isinstance(own, dict) and name not in own:
        # what inspect.getattr_static finds for a name the instance does not hold (the first class on the MRO
        # that defines it), for a fraction of its cost: this runs for several names every epoch
        attr = next((vars(klass)[name] for klass in type(module).__mro__ if name in vars(klass)), None)
    elif isinstance(own, dict) and callable(own[name]) and not isinstance(own[name], types.FunctionType):
        return own[name]  # set on the instance (a functools.partial, a mock): called in the method's place
    else:
        try:
            attr = inspect.getattr_static(module, name)
        except AttributeError:
            return None
    if is_base_hook(attr) or not (inspect.isroutine(attr) or isinstance(attr, (staticmethod, classmethod))):
        return None
    return getattr(module, name)


class Overrides:
    """The module's own versions of :data:`LOOP_METHODS` (bound methods), None where it keeps the default."""

    __slots__ = LOOP_METHODS

    def __init__(self, module: Any = None) -> None:
        def own(name: str) -> Any:
            return overridden(module, name) if module is not None else None

        self.optimizer_step = own("optimizer_step")
        self.optimizer_zero_grad = own("optimizer_zero_grad")
        self.lr_scheduler_step = own("lr_scheduler_step")
        self.configure_gradient_clipping = own("configure_gradient_clipping")
        # ``backward`` is a common name for other things on a plain nn.Module: only ember.Module's is the hook
        self.backward = own("backward") if getattr(type(module), STYLE_ATTR, None) == "module" else None
        self.transfer_batch_to_device = own("transfer_batch_to_device")


NONE = Overrides()


def overrides_of(module: Any) -> Overrides:
    """What the loop must call instead of its defaults (:data:`NONE` for a module that overrides nothing)."""
    found = Overrides(module)
    return found if any(getattr(found, n) is not None for n in LOOP_METHODS) else NONE


# -- the module and the DataModule as plugins ----------------------------------------------------------------
#: Hooks both may define, of which a run calls one: the DataModule's where its class defines it.
SHARED_DATA_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def data_plugins(module: Any, datamodule: Any) -> list[tuple[str, Any, dict]]:
    """The DataModule and the module as ``register_run_plugins`` entries. Of the batch-transfer hooks, each is
    taken from the DataModule where it defines it (the module's is then not called, with a warning where the module
    defines it too), else from the module, as Lightning chooses; the DataModule's placeholders are never called."""
    if datamodule is None:
        return [("module", module, {})]
    owned = frozenset(name for name in SHARED_DATA_HOOKS if defines(datamodule, name))
    for name in sorted(owned):
        if defines(module, name):
            warnings.warn(f"{name} is defined by both {type(module).__name__} and {type(datamodule).__name__}: "
                          "the DataModule's is called and the module's is not. Keep one of the two.",
                          EmberWarning, stacklevel=5)
    return [("datamodule", datamodule, {"datamodule": True, "without": frozenset(SHARED_DATA_HOOKS) - owned}),
            ("module", module, {"without": owned})]


def drop_gradients(trainer: Any, module: Any) -> None:
    """What ``on_validation_model_zero_grad`` does where nothing implements it (``ember.Module``'s default)."""
    module.zero_grad()


# -- role hooks answered by the module ---------------------------------------------------------------------
def role_answers(trainer: Any, module: Any) -> list[tuple[str, Any, dict]]:
    """The plugin answering ``zero_grad``/``batch_to_device``/``backward`` with the module's overrides, as
    ``register_run_plugins`` entries (none when the module overrides none of them), and the warnings for
    overrides this run will not call."""
    found = Overrides(module)
    _warn_uncalled(trainer, module, found)
    answers = types.SimpleNamespace(identity="module.overrides")
    transfer, zero_grad, backward = found.transfer_batch_to_device, found.optimizer_zero_grad, found.backward
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and defines(datamodule, "transfer_batch_to_device"):
        transfer = datamodule.transfer_batch_to_device  # the DataModule's wins, as in Lightning
    if transfer is not None:
        refusing = trainer.loop.log_context.call_refusing  # no self.log inside (Lightning)

        def batch_to_device(batch: Any, device: torch.device, dataloader_idx: int) -> Any:
            return refusing("transfer_batch_to_device", transfer, batch, device, dataloader_idx)

        answers.batch_to_device = hookimpl(batch_to_device)
    if zero_grad is not None:
        def zero_grad_answer(trainer: Any, optimizer: torch.optim.Optimizer) -> bool:
            zero_grad(trainer.current_epoch, trainer.loop.progress.batch_idx, optimizer)
            return True

        answers.zero_grad = hookimpl(specname="zero_grad")(zero_grad_answer)
    if backward is not None and _backward_owner(trainer) is None:
        def backward_answer(trainer: Any, loss: torch.Tensor) -> bool:
            args, kwargs = trainer.loop.training.backward_args
            backward(loss, *args, **kwargs)
            return True

        answers.backward = hookimpl(specname="backward")(backward_answer)
    if len(vars(answers)) == 1:
        return []
    return [("module.overrides", answers, {})]


def _warn_uncalled(trainer: Any, module: Any, found: Overrides) -> None:
    cls = type(module).__name__
    if trainer.state.fn == "fit" and not getattr(module, "automatic_optimization", True):
        for name in _OPTIMIZATION:
            if getattr(found, name) is not None:
                warnings.warn(f"{cls}.{name}() is not called under manual optimization (automatic_optimization="
                              "False), as in Lightning: do that work in training_step.", EmberWarning, stacklevel=5)
    if found.backward is not None:
        owner = _backward_owner(trainer)
        if owner is not None:
            warnings.warn(f"{cls}.backward() is not called: the {owner} plugin does the backward pass (it scales "
                          "the loss). Put code that must run around it in on_before_backward/on_after_backward.",
                          EmberWarning, stacklevel=5)


def check_backward_args(trainer: Any) -> None:
    """Warn when ``manual_backward``'s extra arguments cannot reach ``Tensor.backward``."""
    owner = _backward_owner(trainer)
    if owner is not None:
        warnings.warn(f"manual_backward(): the {owner} plugin does the backward pass and does not take further "
                      "arguments (retain_graph=..., ...); they are not passed on.", EmberWarning, stacklevel=4)


def _backward_owner(trainer: Any) -> str | None:
    """The role plugin that does the backward pass itself (a precision that scales the loss), if any."""
    return next((ident for role, ident in trainer.role_identities.items()
                 if _marked(trainer.role_plugins.get(role), "backward")), None)


def _marked(plugin: Any, name: str) -> bool:
    method = getattr(plugin, name, None) if plugin is not None else None
    return getattr(getattr(method, "__func__", method), "ember_impl", None) is not None


# -- configure_callbacks -------------------------------------------------------------------------------
def attach_callbacks(trainer: Any, module: Any, identity_of: Any) -> None:
    """Add the module's ``configure_callbacks()`` to ``trainer.extra_plugins``; each replaces the Trainer's
    callbacks of its type (or a base of it), as Lightning does."""
    method = overridden(module, "configure_callbacks")
    if method is None:
        return
    callbacks = method()
    if not callbacks:
        return
    callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    present = {type(p) for _, p in trainer.extra_plugins}
    replaced = {base for cb in callbacks for base in present if issubclass(type(cb), base)}
    kept = [(ident, p) for ident, p in trainer.extra_plugins if type(p) not in replaced]
    taken = {ident for ident, _ in kept}
    for cb in callbacks:
        ident = base = identity_of(cb, "callback")
        n = 2
        while ident in taken:
            ident, n = f"{base}-{n}", n + 1
        taken.add(ident)
        kept.append((ident, cb))
    trainer.extra_plugins = kept


# -- optimizer_step with the closure -------------------------------------------------------------------
def loss_of(out: Any) -> torch.Tensor | None:
    """The loss in what ``training_step`` returned (None: skip backward)."""
    if out is None or isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) and "loss" in out:
        return out["loss"]
    raise ConfigurationError(f"training_step returned {type(out).__name__}; return the loss tensor, a dict with a "
                             "'loss' key, or None to skip the batch.")
