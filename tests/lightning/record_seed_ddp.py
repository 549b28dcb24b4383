"""Records tests/lightning/seed_ddp.py (a recording DDPStrategy subclass on 2 gloo CPU processes) on Lightning.

Run in an environment with Lightning installed (not a dependency of ember), from the repository root:
    python tests/lightning/record_seed_ddp.py > tests/lightning/seed_ddp.json
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import seed_ddp  # noqa: E402


def main() -> None:
    import lightning

    recorded = seed_ddp.record("lightning.pytorch", sys.executable, dict(os.environ))
    print(json.dumps({"lightning": lightning.__version__, "recorded": recorded}, indent=1))


if __name__ == "__main__":
    main()
