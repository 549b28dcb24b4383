"""Records Lightning's loop on the scenarios of ``scenarios.py`` and its public surface, for
tests/test_lightning_differential.py and docs/lightning.md.

Run in an environment with Lightning installed (not a dependency of ember), from the repository root:
    python3 -m venv /tmp/venv-lightning && /tmp/venv-lightning/bin/pip install torch==2.13.0 'lightning==2.6.*'
    /tmp/venv-lightning/bin/python tests/lightning/record_loop.py
Re-record after changing scenarios.py; tests/test_lightning_differential.py then compares ember with the file.

Writes tests/lightning/loop.json (what each scenario did: hook calls with their arguments' shapes, metric
dicts, counters, state, final weights) and tests/lightning/surface.json (the names of Lightning's Trainer
arguments and public attributes, LightningModule methods and hooks, and LightningDataModule methods).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import project_runner  # noqa: E402  (next to this file)
import scenarios  # noqa: E402


def framework() -> scenarios.Framework:
    import lightning as L

    return scenarios.Framework("lightning", L.Trainer, L.LightningModule, L.Callback,
                               lambda seed: L.seed_everything(seed, verbose=False))


def public(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def own_public(cls: type, base: type) -> list[str]:
    """Public names ``cls`` defines itself or inherits from Lightning classes, not from ``base``."""
    return sorted(n for n in public(cls) if n not in set(dir(base)))


def surface() -> dict:
    import lightning as L

    trainer_args = {name: (None if p.default is inspect.Parameter.empty else repr(p.default))
                    for name, p in inspect.signature(L.Trainer.__init__).parameters.items() if name != "self"}
    trainer_attrs = public(L.Trainer)
    module_names = own_public(L.LightningModule, torch.nn.Module)
    hooks = sorted(set(public(L.Callback)))
    datamodule_names = public(L.LightningDataModule)
    return {"lightning": L.__version__, "torch": torch.__version__, "trainer_arguments": trainer_args,
            "trainer_attributes": trainer_attrs, "module_names": module_names, "callback_hooks": hooks,
            "datamodule_names": datamodule_names}


def readable(obj: object, indent: str = "") -> str:
    """JSON with one hook call (or other short list) per line, so that a re-recording diffs line by line."""
    inner = indent + " "
    if isinstance(obj, dict) and obj:
        items = [f"{inner}{json.dumps(k)}: {readable(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(obj, list) and obj and all(isinstance(v, dict) for v in obj):
        return "[\n" + ",\n".join(inner + readable(v, inner) for v in obj) + "\n" + indent + "]"
    if isinstance(obj, list) and obj and all(isinstance(v, list) for v in obj):
        return "[\n" + ",\n".join(inner + json.dumps(v) for v in obj) + "\n" + indent + "]"
    return json.dumps(obj)


def main() -> None:
    import warnings

    import lightning as L

    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    fw = framework()
    results = {name: scenarios.run(fw, s) for name, s in scenarios.SCENARIOS.items()}
    loop = {"lightning": L.__version__, "torch": torch.__version__, "cpu": project_runner.cpu_model(),
            "scenarios": results}
    (HERE / "loop.json").write_text(readable(loop) + "\n")
    (HERE / "surface.json").write_text(json.dumps(surface(), indent=1) + "\n")


if __name__ == "__main__":
    main()
