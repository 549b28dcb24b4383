"""Reading what ``configure_optimizers`` returns, the way Lightning accepts it, and stepping schedulers; the
optimizer wrapper a module's code steps (:class:`ManualOptimizer`, Lightning's ``LightningOptimizer``)."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import attrs
import torch

from ember.core.errors import AutomaticOptimizationError, ConfigurationError, SchedulerStateError, suggest, warn_user
from ember.core.loop.module_overrides import loss_of, overridden

_SCHEDULER_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name", "reduce_on_plateau"}
_USAGE = ("configure_optimizers() must return one of: an optimizer; a list/tuple of optimizers; a tuple "
          "(list of optimizers, list of schedulers); a dict {'optimizer': opt, 'lr_scheduler': scheduler or "
          "{'scheduler': s, 'interval': 'epoch'|'step', 'frequency': n, 'monitor': 'metric'}}; or a list of "
          "such dicts")


def _interval(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in ("epoch", "step"):
        raise ConfigurationError(f"lr_scheduler 'interval'={value!r} is invalid: expected 'epoch' or 'step' (The "
                                 "\"interval\" key in lr scheduler dict must be \"step\" or \"epoch\").")


def _frequency(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"lr_scheduler 'frequency'={value!r} is invalid: expected an integer >= 1.")


@attrs.define
class SchedulerConfig:
    """One learning-rate scheduler and when it steps."""

    scheduler: Any
    interval: str = attrs.field(default="epoch", validator=_interval)
    frequency: int = attrs.field(default=1, validator=_frequency)
    monitor: str | None = None
    strict: bool = True
    name: str | None = None
    reduce_on_plateau: bool = False


def _describe(obj: Any) -> str:
    """A short description of what configure_optimizers returned (an optimizer's repr runs to many lines)."""
    if isinstance(obj, (list, tuple)):
        return f"a {type(obj).__name__} of [{', '.join(_describe(o) for o in obj)}]"
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))}"
    if _is_optimizer(obj):
        return type(obj).__name__
    text = repr(obj)
    return f"{text if len(text) <= 40 else text[:37] + '...'} ({type(obj).__name__})"


def _is_optimizer(obj: Any) -> bool:
    return isinstance(obj, torch.optim.Optimizer)


#: Scheduler dict keys that mean nothing under manual optimization (the module steps its schedulers itself).
_AUTOMATIC_ONLY = ("monitor", "strict", "reduce_on_plateau")


def manual_scheduler_config(obj: Any, where: str) -> SchedulerConfig:
    """A scheduler under manual optimization: any object (the module steps it); keys that only drive the loop's
    own stepping are ignored with a warning."""
    if not isinstance(obj, dict):
        return SchedulerConfig(obj)
    ignored = [k for k in obj if k in _AUTOMATIC_ONLY]
    if ignored:
        warnings.warn(f"{where}: the lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored "
                      "under manual optimization, where you call `lr_scheduler.step()` yourself.", RuntimeWarning,
                      stacklevel=6)
    if "scheduler" not in obj:
        raise ConfigurationError(f'{where}: The lr scheduler dict must have the key "scheduler" (the scheduler '
                                 "object).")
    return SchedulerConfig(**{k: v for k, v in obj.items() if k in ("scheduler", "interval", "frequency", "name")})


def scheduler_config(obj: Any, where: str) -> SchedulerConfig:
    if isinstance(obj, dict):
        unknown = set(obj) - _SCHEDULER_KEYS
        if unknown:  # ignored with a warning, as Lightning does
            close = "".join(suggest(str(k), _SCHEDULER_KEYS) for k in sorted(unknown, key=str))
            warnings.warn(f"{where}: Found unsupported keys in the lr scheduler dict: {unknown}; they are ignored "
                          f"(allowed: {sorted(_SCHEDULER_KEYS)}).{close}", RuntimeWarning, stacklevel=6)
            obj = {k: v for k, v in obj.items() if k in _SCHEDULER_KEYS}
        if "scheduler" not in obj:
            raise ConfigurationError(f'{where}: The lr scheduler dict must have the key "scheduler" (the scheduler '
                                     "object).")
        config = SchedulerConfig(**obj)
    else:
        config = SchedulerConfig(obj)
    sched = config.scheduler
    plateau = isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)
    config.reduce_on_plateau = config.reduce_on_plateau or plateau
    if isinstance(sched, torch.optim.lr_scheduler.OneCycleLR) and config.interval == "epoch":
        warn_user(f"{where}: the OneCycleLR scheduler is stepped once per epoch ('interval': 'epoch', the default), "
                  "but its cycle is counted in optimizer steps (total_steps), so it would follow its schedule only "
                  "over that many epochs. Are you sure you didn't mean 'interval': 'step'?", RuntimeWarning)
    if config.reduce_on_plateau and config.monitor is None:
        raise ConfigurationError(f"{where}: ReduceLROnPlateau needs a 'monitor', e.g. "
                                 "{'scheduler': s, 'monitor': 'val_loss'}: `configure_optimizers` must include a "
                                 "monitor when a `ReduceLROnPlateau` scheduler is used.")
    return config


def _unknown(where: str, returned: Any, close: str = "") -> ConfigurationError:
    """What configure_optimizers() returned, when ember cannot read it (``close``: a suggestion for a typo)."""
    return ConfigurationError(f"Unknown configuration for model optimizers: {where} returned {_describe(returned)}."
                              f"{close} {_USAGE}.")


def parse_optimizers(result: Any, automatic: bool = True) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """Split ``configure_optimizers()``'s answer into optimizers and scheduler configs, or explain why not.
    ``automatic=False`` (manual optimization): schedulers are the module's to step, so any object is accepted."""
    optimizers, configs = read_answer(result, scheduler_config if automatic else manual_scheduler_config)
    for config in configs:
        attached = getattr(config.scheduler, "optimizer", None)
        if _is_optimizer(attached) and not any(attached is o for o in optimizers):
            raise ConfigurationError(
                f"configure_optimizers(): the scheduler {type(config.scheduler).__name__} is attached with an "
                "optimizer that wasn't returned from `configure_optimizers`; return that optimizer too (its steps "
                "drive the scheduler).")
    return optimizers, configs


def read_answer(result: Any, read: Any) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """``configure_optimizers()``'s answer as optimizers and schedulers, each scheduler (an object or a dict)
    turned into its config by ``read(scheduler, where)``."""
    where = "configure_optimizers()"
    if result is None:
        return [], []
    if _is_optimizer(result):
        return [result], []
    if isinstance(result, dict):
        result = [result]
    if isinstance(result, (list, tuple)):
        if len(result) == 2 and isinstance(result[0], (list, tuple)) and \
                (isinstance(result[1], (list, tuple)) or not _is_optimizer(result[1])):
            # (optimizers, schedulers), or (optimizers, one scheduler or scheduler dict)
            opts = list(result[0])
            scheds = list(result[1]) if isinstance(result[1], (list, tuple)) else [result[1]]
            if not all(_is_optimizer(o) for o in opts):
                raise _unknown(where, result)
            return opts, [read(s, where) for s in scheds]
        if all(_is_optimizer(o) for o in result) and result:
            return list(result), []
        if all(isinstance(d, dict) for d in result) and result:
            opts, configs = [], []
            for d in result:
                allowed = ("optimizer", "lr_scheduler", "monitor")
                unknown = sorted(set(map(str, d)) - set(allowed))
                close = "".join(suggest(k, allowed) for k in unknown)
                if "optimizer" not in d or not _is_optimizer(d["optimizer"]):
                    raise _unknown(where, d, close)
                if unknown:  # ignored with a warning, as Lightning does (a misspelled key is named)
                    warn_user(f"{where}: Found unsupported keys in the optimizer configuration: {set(unknown)}; they "
                              f"are ignored (allowed: {list(allowed)}).{close}", RuntimeWarning)
                opts.append(d["optimizer"])
                if d.get("lr_scheduler") is not None:
                    sched = d["lr_scheduler"]
                    if not isinstance(sched, dict):
                        sched = {"scheduler": sched}
                    if "monitor" in d and "monitor" not in sched:
                        sched = dict(sched, monitor=d["monitor"])
                    configs.append(read(sched, where))
            return opts, configs
    raise _unknown(where, result)


def validate_schedulers(configs: list[SchedulerConfig], automatic: bool, steps_itself: bool) -> None:
    """Refuse, before the first batch, a scheduler the loop could not step (``steps_itself``: the module overrides
    ``lr_scheduler_step``, which then steps it) or that checkpoints could not save."""
    for config in configs:
        sched = config.scheduler
        name = type(sched).__name__
        loop_steps = automatic and not steps_itself and not isinstance(
            sched, (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau))
        if loop_steps and not callable(getattr(sched, "step", None)):
            raise ConfigurationError(
                f"configure_optimizers(): {sched!r} is not a learning-rate scheduler (it has no step()): it doesn't "
                "follow PyTorch's LRScheduler API. Return a torch.optim.lr_scheduler scheduler, or override "
                "lr_scheduler_step(self, scheduler, metric) in the module to step it yourself (under manual "
                "optimization any object is accepted: the module steps it).")
        if not (callable(getattr(sched, "state_dict", None)) and callable(getattr(sched, "load_state_dict", None))):
            raise SchedulerStateError(
                f"configure_optimizers(): the provided lr scheduler `{name}` is invalid: it has no state_dict() and "
                "load_state_dict(), which checkpoints call to save and restore it. Define both (returning and "
                "taking a dict of its state), or use a scheduler from torch.optim.lr_scheduler.")
        if not loop_steps:
            continue
        try:
            signature = inspect.signature(sched.step)
        except (TypeError, ValueError):  # no signature to read (a builtin): trusted
            continue
        try:
            signature.bind(*((None,) if config.reduce_on_plateau else ()))
        except TypeError:
            raise ConfigurationError(
                f"configure_optimizers(): the provided lr scheduler `{name}` doesn't follow PyTorch's LRScheduler API:"
                f" its step({', '.join(signature.parameters)}) cannot be called as the loop steps a scheduler (step(), or step(metric) with"
                " 'reduce_on_plateau'). Override lr_scheduler_step(self, scheduler, metric) in the module to step it"
                " yourself.") from None


def check_optimization(module: Any, config: Any, optimizers: list[Any], schedulers: list[SchedulerConfig]) -> None:
    """At a fit's start: refuse what the module's optimization and the Trainer's arguments cannot do together
    (manual optimization with clipping or accumulation, several optimizers or an ``optimizer_idx`` step under
    automatic optimization, schedulers the loop cannot step or save); warn when there is no optimizer."""
    automatic = getattr(module, "automatic_optimization", True)
    validate_schedulers(schedulers, automatic, overridden(module, "lr_scheduler_step") is not None)
    if not automatic and config.gradient_clip_val:
        raise ConfigurationError(
            f"Trainer(gradient_clip_val={config.gradient_clip_val}) clips under automatic optimization only; "
            "under manual optimization call self.clip_gradients(opt, gradient_clip_val=...) in training_step "
            "before opt.step(), and remove the RunningTrainer argument.")
    if not automatic and config.accumulate_grad_batches > 1:
        raise ConfigurationError(
            f"Trainer(accumulate_grad_batches={config.accumulate_grad_batches}) accumulates under automatic "
            "optimization only; under manual optimization step the optimizer every N batches yourself.")
    if automatic and len(optimizers) > 1:
        raise AutomaticOptimizationError(
            f"configure_optimizers() returned {len(optimizers)} optimizers; training with multiple optimizers is "
            "only supported with manual optimization. Set `self.automatic_optimization = False` in __init__ and "
            "step them in training_step (see the manual optimization guide).")
    if automatic and "optimizer_idx" in _parameters(getattr(module, "training_step", None)):
        raise AutomaticOptimizationError(
            f"{type(module).__name__}.training_step takes `optimizer_idx`, which the loop never passes (Lightning "
            "1.x passed it to step several optimizers). Remove the `optimizer_idx` argument from `training_step`"
            ", and step several optimizers under manual optimization (`self.automatic_optimization = False`).")
    if not optimizers:
        warnings.warn("configure_optimizers() returned no optimizer: fit will run with no optimizer, calling "
                      "training_step without optimizer steps.", stacklevel=5)


def _parameters(function: Any) -> Any:
    """The parameter names of ``function`` (none when it has no signature)."""
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}


_needs_closure: dict[type, bool] = {}


def needs_closure(optimizer: Any) -> bool:
    """The optimizer's ``step`` takes a closure it must be given (``torch.optim.LBFGS``, which evaluates the loss
    several times per step); looked up once per class."""
    cls = type(optimizer)
    found = _needs_closure.get(cls)
    if found is None:
        step = getattr(cls, "step", None)
        param = None
        if inspect.isfunction(step):  # (not a mock or other callable object put in its place)
            try:
                param = inspect.signature(step).parameters.get("closure")
            except (TypeError, ValueError):
                param = None
        found = _needs_closure[cls] = param is not None and param.default is inspect.Parameter.empty
    return found


_own_step: dict[type, bool] = {}


def passes_closure(optimizer: Any) -> bool:
    """The loop hands a closure to the optimizer's ``step``, which evaluates it (as Lightning always does): for an
    optimizer that needs one (:func:`needs_closure`) and for one whose ``step`` is defined outside torch (a
    subclass's own ``step`` that takes a ``closure``: it may evaluate it more than once, as sharpness-aware
    optimizers do, and it runs before the training step, as in Lightning). torch's own optimizers get the loss
    already evaluated, which saves the closure's calls on every step and changes nothing they can see. Looked up
    once per class."""
    if isinstance(optimizer, ManualOptimizer):  # the wrapper's own step is the loop's
        optimizer = optimizer.optimizer
    cls = type(optimizer)
    found = _own_step.get(cls)
    if found is None:
        step = getattr(cls, "step", None)
        found = needs_closure(optimizer)
        if not found and inspect.isfunction(step) and not str(step.__module__).startswith("torch."):
            try:
                params = inspect.signature(step).parameters
            except (TypeError, ValueError):
                params = {}  # type: ignore[assignment]
            found = "closure" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        _own_step[cls] = found
    return found


def _optimizer_attribute(name: str) -> property:
    """An attribute of the wrapped optimizer, read and written through the wrapper."""
    return property(lambda self: getattr(self.optimizer, name),
                    lambda self, value: setattr(self.optimizer, name, value))


class ManualOptimizer:
    """What ``self.optimizers()`` returns (Lightning's ``LightningOptimizer``): ``step()`` runs the precision's and
    strategy's step and the ``on_before_optimizer_step`` event, and counts ``global_step``. It is an instance of
    the optimizer's class too (``isinstance(opt, torch.optim.SGD)``); ``state``, ``param_groups`` and ``defaults``
    are the optimizer's own. ``training`` is the run's training loop (its ``optimizer_step``); built outside a run
    (``LightningOptimizer(optimizer)``), ``step`` is the optimizer's.

    With ``clip=True, count=False`` it is the optimizer handed to a module's own ``optimizer_step`` override:
    ``step(closure)`` runs the closure, then the loop's step (unscale, ``on_before_optimizer_step``, clipping, the
    precision's and strategy's step); the override's call counts the step."""

    def __init__(self, optimizer: Any, training: Any = None, clip: bool = False,
                 count: bool = True) -> None:
        self.__dict__.update(_optimizer=optimizer, training=training, _clip=clip, _count=count)
        if isinstance(optimizer, torch.optim.Optimizer):
            self.__class__ = _wrapper_class(type(self), type(optimizer))

    @property
    def optimizer(self) -> Any:
        return self.__dict__["_optimizer"]

    def step(self, closure: Any = None, **kwargs: Any) -> Any:
        """Step the optimizer as the loop does (see the class); returns what the optimizer's ``step`` returned
        (the closure's loss when one is given, as ``torch.optim`` optimizers return it)."""
        training = self.training
        if training is None:
            return self.optimizer.step(closure, **kwargs) if closure is not None else self.optimizer.step(**kwargs)
        training.step_result = None
        if closure is None or passes_closure(self.optimizer):  # LBFGS, an optimizer's own step: it evaluates it
            training.optimizer_step(self.optimizer, clip=self._clip, count=self._count, closure=closure,
                                    step_kwargs=kwargs)
        else:
            result = closure()  # training_step and backward first; the optimizer's own step gets the result
            training.optimizer_step(self.optimizer, clip=self._clip, count=self._count, evaluated=lambda: result,
                                    step_kwargs=kwargs)
        result, training.step_result = training.step_result, None  # (no loss kept alive until the next step)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    state = _optimizer_attribute("state")
    param_groups = _optimizer_attribute("param_groups")
    defaults = _optimizer_attribute("defaults")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "_optimizer" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_optimizer"], name)

    def __repr__(self) -> str:
        return f"Lightning{self.optimizer!r}"

    def __reduce__(self) -> Any:  # the per-optimizer class is made at run time: pickle as the base class
        return (ManualOptimizer, (self.optimizer, None, self._clip, self._count))


_wrapper_classes: dict[tuple[type, type], type] = {}


def _wrapper_class(base: type, optimizer_class: type) -> type:
    """``base`` made a subclass of ``optimizer_class`` too, named after it (``LightningSGD``); made once per pair."""
    made = _wrapper_classes.get((base, optimizer_class))
    if made is None:
        made = _wrapper_classes[base, optimizer_class] = type(
            f"Lightning{optimizer_class.__name__}", (base, optimizer_class), {"__module__": base.__module__})
    return made


def step_outputs(out: Any) -> Any:
    """What ``on_train_batch_end`` is given as ``outputs``: the step's output with its loss detached."""
    if isinstance(out, torch.Tensor):
        return {"loss": out.detach()}
    if isinstance(out, dict) and isinstance(out.get("loss"), torch.Tensor):
        return {**out, "loss": out["loss"].detach()}
    return out


def batch_with_optimizer_step(training: Any, batch: Any, batch_idx: int, is_last: bool) -> Any:
    """One automatic-optimization batch of a module that overrides ``optimizer_step``, or whose optimizer evaluates
    the loss itself (LBFGS, an optimizer's own ``step``): training step and backward run in the closure the
    optimizer step calls. ``training``: the fit's :class:`~ember.core.loop.training.TrainingLoop`."""
    t = training.t
    k = t.config.accumulate_grad_batches
    if not t.optimizers or not (is_last or (batch_idx + 1) % k == 0):
        return training.automatic_batch(batch, batch_idx, is_last)  # no step on this batch: nothing to override
    h, module, opt = t.hook, t.module, t.optimizers[0]
    outputs: list[Any] = []

    def optimizer_closure() -> torch.Tensor | None:
        with torch.enable_grad():
            out = h.step(trainer=t, model=t.model, module=module, batch=batch, batch_idx=batch_idx,
                         dataloader_idx=0, stage="train")
            loss = loss_of(out)
            training.zero_grad_and_backward(loss, opt, batch_idx)
        outputs.append(out)
        return loss.detach() if loss is not None else None

    step = getattr(module, "optimizer_step", None)  # a module without it: an LBFGS-like optimizer alone brings us
    if step is None:
        training.closure_optimizer(opt).step(closure=optimizer_closure)
    else:
        step(t.current_epoch, batch_idx, training.closure_optimizer(opt), optimizer_closure)
    if not outputs:
        raise ConfigurationError(f"{type(module).__name__}.optimizer_step() did not run optimizer_closure, which runs "
                                 "training_step and backward: call optimizer.step(closure=optimizer_closure) (or "
                                 "optimizer_closure()) in it.")
    training.progress.global_step += 1
    return outputs[-1]
