"""Records what the projects of ``projects/`` do on Lightning, for tests/test_lightning_projects.py.

Run in an environment with Lightning and torchmetrics installed (neither is a dependency of ember), from the
repository root (see record_loop.py for making that environment):
    /tmp/venv-lightning/bin/python tests/lightning/record_projects.py
Writes tests/lightning/projects.json. Re-record after changing a project.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import project_runner  # noqa: E402
from record_loop import readable  # noqa: E402


def main() -> None:
    import lightning as L
    import torchmetrics

    torch.set_num_threads(1)
    out = {"lightning": L.__version__, "torch": torch.__version__, "torchmetrics": torchmetrics.__version__,
           "cpu": project_runner.cpu_model(),
           "projects": {}}
    for name in project_runner.NAMES:
        with tempfile.TemporaryDirectory() as root:
            out["projects"][name] = project_runner.run(name, project_runner.source(name), L.Callback, Path(root))
    (HERE / "projects.json").write_text(readable(out) + "\n")


if __name__ == "__main__":
    main()
