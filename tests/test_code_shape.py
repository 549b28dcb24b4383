"""The shape of the code, measured on the source (issue 11): short functions, modules of a readable size, and
no reaching into another object's private attributes.

Run with ``-s`` to see the figures: ``pytest tests/test_code_shape.py -s``.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

import ember

PACKAGE = Path(ember.__file__).parent
ROOT = PACKAGE.parent

#: The longest a function in ember/core and ember/plugins may be (lines, decorators excluded).
MAX_FUNCTION_LINES = 60
#: The most lines a module may have, unless listed below.
MAX_MODULE_LINES = 500
#: Modules allowed to be longer: path -> (lines they may not pass, why).
LONG_MODULES = {
    "ember/hookspecs/protocols.py": (720, "hook specifications whose docstrings are the generated reference "
                                          "(docs/hooks.md): one documented spec per role hook"),
    "ember/hookspecs/events.py": (600, "one documented spec per Lightning event, with the loop's pseudocode"),
}
#: The most accesses to another ember object's private attribute, each listed in OWN_PRIVATE.
MAX_OWN_PRIVATE = 5
#: ``file name: expression`` -> why it reads or writes an ember object's private attribute.
OWN_PRIVATE = {
    "cli_plugins.py: info._failed": "`ember plugins` reports a plugin that fails to instantiate with the "
                                    "error the discovery record builds for a plugin that fails to load",
    "torchrun.py: hook._ember_rank": "marks the excepthook it installs, so it is installed once per process",
    "__init__.py: mps._get_all_available_mps_gpus": "Lightning's own (private) function name, in ember's twin of "
                                                    "lightning.fabric.accelerators.mps: tests written for Lightning "
                                                    "patch it to fake an MPS device, so the count is read through it",
    "checkpoint_connector.py: trainer_class._checkpoint_connector": "Lightning's own (private) name on its "
                                                                    "Trainer, which code written for Lightning "
                                                                    "calls; given to the Trainer class once a "
                                                                    "script takes Lightning's Trainer",
    "data_connector.py: trainer_class._data_connector": "Lightning's own (private) name on its Trainer, which code "
                                                        "written for Lightning calls; given to the Trainer class once "
                                                        "a script takes Lightning's Trainer",
}
#: Why ember reaches into torch's DataLoader iterator (ember/core/loop/data.py).
_DEAD_WORKER = ("a DataLoader worker that died: torch raises its error from its SIGCHLD handler again and again "
                "until the iterator that owns the worker is shut down; torch has no public way to find or shut it")
#: ``file name: expression`` -> why ember uses a private name of Python or torch.
LIBRARY_PRIVATE = {
    "launcher.py: os._exit": "documented: ends a forked worker without running the parent's clean-up",
    "spawn.py: os._exit": "documented: a spawned worker whose parent died before it was tied to it ends at once",
    "hang_watchdog.py: os._exit": "documented: ends a hung process from the watchdog thread",
    "hang_watchdog.py: sys._current_frames": "documented: every thread's stack for the hang report",
    "hang_watchdog.py: dist.distributed_c10d._get_default_store": "the process group's store, to tell the other "
                                                                  "ranks about a hang; torch has no public getter",
    "swa.py: torch.nn.modules.batchnorm._BatchNorm": "the base of every batch-norm layer, as torch's own "
                                                     "swa_utils.update_bn tests for it",
    "weight_averaging.py: torch._foreach_copy_": "one kernel copies every averaged tensor back, as torch's "
                                                 "optimizers' foreach paths do",
    "grad_norm.py: torch._foreach_norm": "one kernel for every gradient's norm, as torch's clip_grad_norm_ does",
    "nan_guard.py: torch._foreach_norm": "one kernel for every gradient's norm, as torch's clip_grad_norm_ does",
    "dcp_reader.py: metadata._MEM_FORMAT_ENCODING": "DCP metadata holds it: the restricted unpickler must allow it",
    "dcp_reader.py: filesystem._StorageInfo": "DCP metadata holds it: the restricted unpickler must allow it",
    "sampler.py: sampler._num_samples": "RandomSampler(num_samples=...) cannot become a DistributedSampler; "
                                        "torch keeps the argument only there",
    "data.py: dataloader._MultiProcessingDataLoaderIter": _DEAD_WORKER,
    "data.py: it._shutdown": _DEAD_WORKER,
    "data.py: it._shutdown_workers": _DEAD_WORKER,
    "data.py: it._worker_pids_set": _DEAD_WORKER,
    "data.py: it._workers": _DEAD_WORKER,
    "data.py: signal_handling._remove_worker_pids": _DEAD_WORKER,
    "torch_save.py: storage._cdata": "how torch.save tells one storage from another (two tensors viewing one "
                                     "storage get one record); the same key keeps ember's bytes torch.save's",
    "torch_save.py: t._backward_hooks": "a tensor with hooks goes to torch.save, which warns that they are not saved",
    "torch_save.py: torch._utils": "the function torch.save's files name to rebuild a tensor",
    "torch_save.py: torch._utils._rebuild_tensor_v2": "the function torch.save's files name to rebuild a tensor: "
                                                      "torch.load(weights_only=True) allows it",
    "plugin_manager.py: getattr(self.hook, hook_name)._add_hookimpl": "pluggy's register() adds each implementation "
                                                                     "this way; a Lightning-style method taken by "
                                                                     "position is added the same way, with no adapter "
                                                                     "call in between",
}


def sources(*subpackages: str) -> list[Path]:
    roots = [PACKAGE / s for s in subpackages] if subpackages else [PACKAGE]
    return sorted(p for r in roots for p in r.rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def function_lengths(path: Path) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method, from its ``def`` to its last line."""
    tree = ast.parse(path.read_text())
    return [(node.end_lineno - node.lineno + 1, f"{rel(path)}:{node.lineno} {node.name}")
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None]


def private_accesses(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each read or write of an attribute named ``_x`` (dunders aside) on a receiver
    other than ``self``, ``cls`` or ``super()``: another object's private attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            continue
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def all_private_accesses() -> Counter[str]:
    return Counter(f"{path.name}: {expr}" for path in sources() for _, expr in private_accesses(path.read_text()))


def test_the_private_access_scan() -> None:
    source = """
class A:
    def f(self, other):
        self._mine = cls._also_mine = super()._parent()
        other._theirs = 1
        return other.__class__, trainer._loops._batches_seen, torch._foreach_norm([])
"""
    assert [e for _, e in private_accesses(source)] == ["other._theirs", "trainer._loops._batches_seen",
                                                        "trainer._loops", "torch._foreach_norm"]


def test_functions_in_core_and_plugins_are_short() -> None:
    lengths = sorted((f for p in sources("core", "plugins") for f in function_lengths(p)), reverse=True)
    print(f"\nlongest functions in ember/core and ember/plugins: {lengths[:3]}")
    long = [f for f in lengths if f[0] > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them by what they do): {long}"


def test_modules_are_readable_in_one_sitting() -> None:
    sizes = sorted(((len(p.read_text().splitlines()), rel(p)) for p in sources()), reverse=True)
    print(f"\nlargest modules: {sizes[:4]}")
    for lines, path in sizes:
        limit, why = LONG_MODULES.get(path, (MAX_MODULE_LINES, ""))
        assert lines <= limit, f"{path} has {lines} lines, over {limit}: split it by idea" + \
            (f" (allowed to pass {MAX_MODULE_LINES} because: {why})" if why else "")


def test_private_attributes_stay_private() -> None:
    found = all_private_accesses()
    own = {k: n for k, n in found.items() if k in OWN_PRIVATE}
    library = {k: n for k, n in found.items() if k in LIBRARY_PRIVATE}
    print(f"\nprivate attributes of another ember object: {sum(own.values())}: {own}")
    print(f"private names of Python/torch: {sum(library.values())}: {library}")
    unlisted = sorted(k for k in found if k not in OWN_PRIVATE and k not in LIBRARY_PRIVATE)
    assert not unlisted, (f"{unlisted}: another object's private attribute. Use or add a public name; if it "
                          "truly cannot be avoided, list it in tests/test_code_shape.py with why.")
    assert sum(own.values()) <= MAX_OWN_PRIVATE


@pytest.mark.parametrize("module", ["loops", "training", "evaluation"])
def test_no_loop_module_reaches_into_the_trainer(module: str) -> None:
    """The loops write run state into records they own (ember/core/loop/state.py), not the Trainer's privates."""
    path = PACKAGE / "core" / "loop" / f"{module}.py"
    assert private_accesses(path.read_text()) == []
