"""Runs the projects of ``projects/`` (each one source text written against ``lightning`` imports) on Lightning
(``record_projects.py``, which writes ``projects.json``) or, with only the import lines rewritten, on ember
(``tests/test_lightning_projects.py``, which compares with that file). Nothing here imports Lightning.

A project defines ``main(root, callbacks)``: it trains in the folder ``root``, passes ``callbacks`` (a recorder
added here) to each Trainer it makes, and returns a dict with its last ``trainer``, its ``model`` and whatever else
it wants compared (metric dicts, predictions, values read from callbacks).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import torch

PROJECTS = Path(__file__).resolve().parent / "projects"
NAMES = sorted(p.stem for p in PROJECTS.glob("*.py"))

#: callback hooks the recorder logs (name -> the positional arguments after (trainer, module) it keeps a
#: shape of); the batch hooks log their batch index.
RECORDED = ("setup", "on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_batch_end",
            "on_validation_start", "on_validation_epoch_end", "on_train_epoch_end", "on_train_end",
            "on_fit_end", "teardown", "on_test_start", "on_test_epoch_end", "on_predict_start",
            "on_predict_epoch_end", "on_save_checkpoint", "on_load_checkpoint", "on_before_optimizer_step",
            "on_exception")

_IMPORT = re.compile(r"^(\s*)(import|from)\s+(\S+)(.*)$")


def cpu_model() -> str:
    """The processor's model name (Linux), or the platform's word for it, and the instruction set torch's CPU
    kernels use on it (``AVX2``, ``AVX512``, ...): weights are bitwise equal only where both are those a fixture
    was recorded with."""
    import platform

    import torch

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()})"


def source(name: str) -> str:
    return (PROJECTS / f"{name}.py").read_text()


def to_ember(text: str) -> str:
    """The project with its import lines changed as a user porting it would: nothing else is touched."""
    out = []
    for line in text.splitlines():
        m = _IMPORT.match(line)
        if m:
            indent, kw, mod, rest = m.groups()
            head, _, tail = mod.partition(".")
            if head == "pytorch_lightning":
                mod = "ember.lightning.pytorch" + ("." + tail if tail else "")
            elif head == "lightning":
                mod = "ember.lightning" + ("." + tail if tail else "")
            line = f"{indent}{kw} {mod}{rest}"
        out.append(line)
    return "\n".join(out) + "\n"


def _plain(value: Any) -> Any:
    """Tensors to lists of floats (exact: float32 -> float64 -> JSON round-trips), containers recursively."""
    if isinstance(value, torch.Tensor):
        return value.detach().double().tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def recorder(callback_base: type, calls: list[list[Any]]) -> Any:
    """A Lightning-style callback (positional arguments) that logs ``RECORDED`` hooks with the step and epoch."""

    def make(hook: str) -> Any:
        def method(self: Any, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
            args = (*args, *kwargs.values())  # Lightning passes setup/teardown's stage by keyword
            extra: list[Any] = []
            if hook in ("setup", "teardown"):
                extra = [args[0]]
            elif hook == "on_train_batch_end":
                extra = [args[2]]
            elif hook == "on_exception":
                extra = [type(args[0]).__name__]
            calls.append([hook, trainer.global_step, trainer.current_epoch, *extra])
        method.__name__ = hook
        return method

    return type("Recorder", (callback_base,), {h: make(h) for h in RECORDED})()


def run(name: str, text: str, callback_base: type, root: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"project_{name}"}
    exec(compile(text, f"<project {name}>", "exec"), namespace)
    calls: list[list[Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = namespace["main"](root, [recorder(callback_base, calls)])
    trainer, model = result.pop("trainer"), result.pop("model")
    return {
        "calls": calls,
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "callback_metrics": {k: _plain(v) for k, v in sorted(trainer.callback_metrics.items())},
        "status": str(trainer.state.status).split(".")[-1].lower(),
        "weights": {k: _plain(v) for k, v in model.state_dict().items()},
        "returned": _plain(result),
    }
