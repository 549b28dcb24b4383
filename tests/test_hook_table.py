"""The per-run hook table: what the loop calls must behave exactly as pluggy's call would, only cheaper."""

from __future__ import annotations

from typing import Any

import pluggy
import pytest
import torch

import ember
from ember.core.hooks.defaults import Defaults
from ember.core.hooks.plugin_manager import HookTable, PluginManager, compile_call
from ember.core.hooks.positional import spec_named
from ember.testing import TinyClassifier, tiny_loaders


def _pm(*plugins: Any) -> PluginManager:
    pm = PluginManager()
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"p{i}")
    return pm


class Answer:
    def __init__(self, value: Any, calls: list[str], tag: str) -> None:
        self.value, self.calls, self.tag = value, calls, tag

    @ember.hookimpl
    def optimizer_step(self, optimizer: Any) -> Any:
        self.calls.append(f"{self.tag}:{optimizer}")
        return self.value


@pytest.mark.parametrize("values", [(None, None, None), (None, 2, 3), (1, 2, None), (None, None, 3)])
def test_firstresult_call_matches_pluggy(values: tuple[Any, ...]) -> None:
    pluggy_calls: list[str] = []
    table_calls: list[str] = []
    pm_a = _pm(*[Answer(v, pluggy_calls, str(i)) for i, v in enumerate(values)])
    pm_b = _pm(*[Answer(v, table_calls, str(i)) for i, v in enumerate(values)])
    expected = pm_a.hook.optimizer_step(trainer=None, module=None, optimizer="opt")
    table = HookTable(pm_b)
    assert table.optimizer_step is not pm_b.hook.optimizer_step  # compiled, not pluggy's caller
    got = table.optimizer_step(trainer=None, module=None, optimizer="opt")
    assert got == expected
    assert table_calls == pluggy_calls  # same order (last registered first), stopped at the same answer


class Event:
    def __init__(self, value: Any, calls: list[Any]) -> None:
        self.value, self.calls = value, calls

    def on_train_batch_start(self, batch_idx: int, batch: Any) -> Any:
        self.calls.append((id(self), batch_idx, batch))
        return self.value


@pytest.mark.parametrize("values", [(None,), (-1,), (None, -1, 5), (None, None)])
def test_event_call_matches_pluggy(values: tuple[Any, ...]) -> None:
    calls_a: list[Any] = []
    calls_b: list[Any] = []
    plugins_a = [Event(v, calls_a) for v in values]
    plugins_b = [Event(v, calls_b) for v in values]
    expected = _pm(*plugins_a).hook.on_train_batch_start(trainer=1, module=2, batch="b", batch_idx=7)
    got = HookTable(_pm(*plugins_b)).on_train_batch_start(trainer=1, module=2, batch="b", batch_idx=7)
    assert got == expected
    order_a = [plugins_a.index(next(p for p in plugins_a if id(p) == c[0])) for c in calls_a]
    order_b = [plugins_b.index(next(p for p in plugins_b if id(p) == c[0])) for c in calls_b]
    assert order_a == order_b and [c[1:] for c in calls_a] == [c[1:] for c in calls_b]


def test_parameters_with_defaults_get_the_passed_value_or_keep_their_default() -> None:
    seen: list[Any] = []

    class WithDefault:
        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int = 99) -> Any:
            seen.append(dataloader_idx)
            return batch

    table = HookTable(_pm(WithDefault()))
    table.on_after_batch_transfer(trainer=None, module=None, batch="b", dataloader_idx=3)
    table.on_after_batch_transfer(trainer=None, module=None, batch="b")
    assert seen == [3, 99]


def test_a_missing_needed_argument_or_an_unknown_keyword_is_an_error() -> None:
    class Needs:
        def on_train_batch_end(self, batch_idx: int) -> None:
            pass

    table = HookTable(_pm(Needs()))
    with pytest.raises(TypeError, match="batch_idx"):
        table.on_train_batch_end(trainer=None, module=None, outputs=None, batch=None)
    with pytest.raises(TypeError, match="batch_ix"):
        table.on_train_batch_end(trainer=None, module=None, outputs=None, batch=None, batch_idx=0, batch_ix=0)
    # arguments no implementation asks for may be left out
    assert table.on_train_batch_end(batch_idx=0) == []


def test_exceptions_propagate_and_stop_later_implementations() -> None:
    calls: list[str] = []

    class Boom:
        def on_train_start(self) -> None:
            calls.append("boom")
            raise ValueError("boom")

    class Later:
        def on_train_start(self) -> None:
            calls.append("later")

    table = HookTable(_pm(Later(), Boom()))  # Boom registered last: called first
    with pytest.raises(ValueError, match="boom"):
        table.on_train_start(trainer=None, module=None)
    assert calls == ["boom"]


def test_unimplemented_hooks_are_none_and_unknown_names_raise() -> None:
    table = HookTable(_pm())
    assert table.on_train_batch_start is None
    with pytest.raises(AttributeError, match="no ember hook named 'on_train_batch_strat'"):
        table.on_train_batch_strat  # noqa: B018


def test_entries_follow_registration_and_unregistration() -> None:
    pm = _pm()
    table = HookTable(pm)
    assert table.on_train_start is None

    class Starts:
        def on_train_start(self) -> None:
            pass

    starts = Starts()
    pm.register(starts, name="starts")
    assert table.on_train_start is not None
    pm.unregister(starts)
    assert table.on_train_start is None


def test_noop_fallback_alone_is_skipped_but_seen_under_monitoring() -> None:
    pm = _pm(Defaults())
    table = HookTable(pm)
    assert table.unscale_gradients is None  # only core.defaults' no-op answers it: the loop skips the call
    assert table.optimizer_step is not None

    class Scaler:
        @ember.hookimpl
        def unscale_gradients(self, optimizer: Any) -> bool:
            return True

    scaler = Scaler()
    pm.register(scaler, name="precision.scaler")
    assert table.unscale_gradients is not None
    pm.unregister(scaler)
    seen: list[str] = []
    undo = pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(name), lambda *a: None)
    try:
        assert table.unscale_gradients is not None  # traced runs show every call
        table.unscale_gradients(trainer=None, optimizer=None)
        table.optimizer_step(trainer=None, module=None, optimizer=torch.optim.SGD([torch.zeros(1)], lr=0.1))
        pm.hook.unscale_gradients(trainer=None, optimizer=None)  # a direct pluggy call is monitored as well
    finally:
        undo()
    assert seen == ["unscale_gradients", "optimizer_step", "unscale_gradients"]
    assert table.unscale_gradients is None
    assert not pm.monitored


def test_monitors_nest_as_in_pluggy_and_may_swap_implementations() -> None:
    events: list[Any] = []

    def monitor(tag: str) -> Any:
        def before(name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
            events.append((tag, "before", name, kwargs["optimizer"]))
            if tag == "outer":  # replace the implementation with a copy that answers differently
                impls[0] = pluggy.HookImpl(impls[0].plugin, impls[0].plugin_name, lambda optimizer: "swapped",
                                           impls[0].opts)

        def after(outcome: pluggy.Result, name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
            events.append((tag, "after", name, outcome.get_result()))

        return before, after

    for use_table in (False, True):
        events.clear()
        pm = _pm(Answer("real", [], "a"))
        undo_inner = pm.add_hookcall_monitoring(*monitor("inner"))
        undo_outer = pm.add_hookcall_monitoring(*monitor("outer"))
        hook = HookTable(pm).optimizer_step if use_table else pm.hook.optimizer_step
        assert hook(trainer=None, module=None, optimizer="opt") == "swapped"
        undo_outer()
        undo_inner()
        assert events == [("outer", "before", "optimizer_step", "opt"), ("inner", "before", "optimizer_step", "opt"),
                          ("inner", "after", "optimizer_step", "swapped"),
                          ("outer", "after", "optimizer_step", "swapped")]


def test_call_answers_for_unimplemented_hooks_and_call_each_replaces_implementations() -> None:
    table = HookTable(_pm())
    assert table.call("optimizer_step", trainer=None, module=None, optimizer=None) is None  # firstresult
    assert table.call("on_train_start", trainer=None, module=None) == []
    with pytest.raises(AttributeError, match="no ember hook named"):
        table.call("on_train_strat")
    table = HookTable(_pm(Answer(1, [], "a"), Answer(None, [], "b")))
    answers = table.call_each("optimizer_step", lambda impl: pluggy.HookImpl(
        impl.plugin, impl.plugin_name, lambda optimizer: f"{impl.plugin.tag}:{optimizer}", impl.opts),
        trainer=None, module=None, optimizer="o")
    assert answers == "b:o"  # the wrapped copies ran, last registered first


def _wrapper_plugins(case: str, log: list[str]) -> list[Any]:
    """Plugins for one wrapper scenario; ``log`` records what ran, in order."""

    class Answer:
        @ember.hookimpl
        def optimizer_step(self, optimizer: Any) -> Any:
            log.append("answer")
            if case == "inner raises" or case == "wrapper swallows":
                raise ValueError("inner")
            return optimizer

    class Outer:
        @ember.hookimpl(wrapper=True)
        def optimizer_step(self) -> Any:
            log.append("outer before")
            try:
                result = yield
            except ValueError as exc:
                log.append(f"outer saw {exc}")
                if case == "wrapper swallows":
                    return "replaced"
                raise
            finally:
                log.append("outer after")
            return f"outer({result})"

    class Inner:
        @ember.hookimpl(wrapper=True, tryfirst=False)
        def optimizer_step(self, trainer: Any) -> Any:
            log.append("inner before")
            if case == "setup raises":
                raise ValueError("setup")
            if case == "no yield":
                return "never"
            result = yield
            log.append("inner after")
            return f"inner({result})"

    class First:
        @ember.hookimpl(wrapper=True, tryfirst=True)
        def optimizer_step(self) -> Any:
            log.append("first before")
            result = yield
            log.append("first after")
            return result

    plugins: list[Any] = [Answer(), Inner(), Outer()]
    if case == "three wrappers":
        plugins.append(First())
    if case == "no yield":
        plugins = [Answer(), Inner()]
    return plugins


@pytest.mark.parametrize("case", ["plain", "three wrappers", "inner raises", "wrapper swallows", "setup raises",
                                  "no yield"])
def test_wrapped_call_matches_pluggy(case: str) -> None:
    outcomes = []
    for use_table in (False, True):
        log: list[str] = []
        pm = _pm(*_wrapper_plugins(case, log))
        hook = HookTable(pm).optimizer_step if use_table else pm.hook.optimizer_step
        if use_table:
            assert not isinstance(hook, pluggy.HookCaller)
        try:
            outcome: Any = ("returned", hook(trainer="t", module="m", optimizer="opt"))
        except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
            outcome = ("raised", type(exc).__name__, str(exc).split(" wrap_controller")[0][:40])
        outcomes.append((outcome, log))
    assert outcomes[1] == outcomes[0]


def test_wrapped_event_hook_receives_the_list_of_answers() -> None:
    seen: list[Any] = []

    class Wrap:
        @ember.hookimpl(wrapper=True)
        def on_train_batch_start(self) -> Any:
            answers = yield
            seen.append(list(answers))
            return answers + ["wrapped"]

    got = HookTable(_pm(Event(-1, []), Event(None, []), Wrap())).on_train_batch_start(
        trainer=None, module=None, batch=None, batch_idx=0)
    assert seen == [[-1]] and got == [-1, "wrapped"]


def _old_style_plugins(case: str, log: list[str]) -> list[Any]:
    class Inner:
        @ember.hookimpl
        def optimizer_step(self) -> Any:
            log.append("inner")
            if case in ("inner raises", "swallows"):
                raise ValueError("inner")
            return "answer"

    class Old:
        @ember.hookimpl(hookwrapper=True)
        def optimizer_step(self, optimizer: Any) -> Any:
            log.append(f"old before {optimizer}")
            outcome = yield
            log.append(f"old after {outcome.exception!r}")
            if case == "replaces":
                outcome.force_result("replaced")
            if case == "swallows":
                outcome.force_result("swallowed")

    return [Inner(), Old()]


@pytest.mark.parametrize("case", ["passes", "replaces", "inner raises", "swallows"])
def test_old_style_hookwrapper_matches_pluggy(case: str) -> None:
    outcomes = []
    for use_table in (False, True):
        log: list[str] = []
        pm = _pm(*_old_style_plugins(case, log))
        hook = HookTable(pm).optimizer_step if use_table else pm.hook.optimizer_step
        if use_table:
            assert not isinstance(hook, pluggy.HookCaller)
        try:
            outcome: Any = ("returned", hook(trainer="t", module="m", optimizer="opt"))
        except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
            outcome = ("raised", type(exc).__name__, str(exc))
        outcomes.append((outcome, log))
    assert outcomes[1] == outcomes[0]


def test_compiled_source_is_inspectable() -> None:
    pm = _pm(Defaults())
    fn = compile_call(pm.hook.backward, pm.hook.backward.get_hookimpls())
    assert fn.__doc__ is not None and "def backward(*, trainer, loss, optimizer=None)" in fn.__doc__


def test_tables_of_finished_runs_are_not_kept_alive() -> None:
    trainer = ember.Trainer(accelerator="cpu", max_epochs=1)
    train, val = tiny_loaders(n=16, batch_size=8)
    model = TinyClassifier()
    for _ in range(3):
        trainer.fit(model, train, val)
    assert len(trainer.plugin_manager._listeners) <= 2



def test_the_pluggy_api_the_dispatch_reads_is_there() -> None:
    """ember's dispatch (ember/core/hooks/dispatch.py) reads only these public pluggy names; a pluggy release that
    renames or drops one fails here rather than inside a run."""
    pm = _pm(Defaults())
    caller = pm.hook.optimizer_step
    assert isinstance(caller, pluggy.HookCaller) and caller.spec is not None
    assert caller.spec.argnames == ("trainer", "module", "optimizer") and caller.spec.opts["firstresult"] is True
    assert isinstance(getattr(caller.spec, "kwargnames", ()), tuple)
    (impl,) = caller.get_hookimpls()
    for field in ("plugin", "plugin_name", "function", "argnames", "kwargnames", "opts", "wrapper", "hookwrapper"):
        assert hasattr(impl, field), field
    copy = pluggy.HookImpl(impl.plugin, impl.plugin_name, impl.function, impl.opts)
    assert copy.argnames == impl.argnames
    assert pluggy.Result(1, None).get_result() == 1 and pluggy.Result(None, KeyError()).exception is not None


def test_pluggy_reads_implementation_names_through_wrapped_and_instance_attributes() -> None:
    """Positional hooks (ember/core/hooks/positional.py) go through pluggy's public register(): pluggy finds a bound
    method stored on the instance and reads its argument names through ``__wrapped__``. A pluggy release that
    stops doing either fails here rather than in a run."""
    spec, impl = pluggy.HookspecMarker("probe"), pluggy.HookimplMarker("probe")

    class Specs:
        @spec
        def event(self, first: Any, second: Any) -> None: ...

    class Plugin:
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def any_name(self, value: Any) -> None:
            self.seen.append(value)

    plugin = Plugin()
    named = spec_named(plugin.any_name, ("second",))
    assert named is not None
    impl(named.__func__)
    plugin.__dict__["event"] = named
    pm = pluggy.PluginManager("probe")
    pm.add_hookspecs(Specs)
    pm.register(plugin)
    pm.hook.event(first=1, second=2)
    assert plugin.seen == [2]
    assert pm.hook.event.get_hookimpls()[0].argnames == ("second",)


class ByPosition(ember.Callback):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_train_batch_end(self, tr: Any, mod: Any, out: Any, b: Any, i: Any) -> None:
        self.seen.append(i)


def test_a_positional_hook_is_the_users_code_and_leaves_the_object_as_it_was() -> None:
    callback = ByPosition()
    callback.on_train_epoch_end = lambda *a: None  # an instance attribute of its own, kept  # type: ignore[method-assign]
    before = dict(vars(callback))
    pm = _pm(callback)
    (impl,) = pm.hook.on_train_batch_end.get_hookimpls()
    assert impl.plugin is callback and impl.argnames == ("trainer", "module", "outputs", "batch", "batch_idx")
    assert impl.function.__func__.__code__ is ByPosition.on_train_batch_end.__code__  # no adapter in between
    assert vars(callback) == before
    pm.hook.on_train_batch_end(trainer=None, module=None, outputs={}, batch=(), batch_idx=3)
    assert callback.seen == [3]


def test_tables_with_same_shaped_implementations_call_their_own() -> None:
    class Answers:
        def __init__(self, value: int) -> None:
            self.value = value

        @ember.hookimpl
        def root_device(self, trainer: Any) -> Any:
            return self.value

    tables = []
    for value in (1, 2):
        pm = _pm()
        pm.register(Answers(value), name="answers")
        tables.append(HookTable(pm))
    assert [table.root_device(trainer=None) for table in tables] == [1, 2]
    assert tables[0].root_device.__code__ is tables[1].root_device.__code__  # one compiled source for the shape
