"""Records what Lightning does in the scenarios of api_scenarios.py, for tests/test_lightning_api.py.

Run in an environment with Lightning 2.6 installed (not a dependency of ember):
    python tests/lightning/record_lightning_api.py > tests/lightning/lightning_api.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_scenarios import SCENARIOS  # noqa: E402


def main() -> None:
    import lightning as L

    warnings.filterwarnings("ignore")
    records = {"lightning_version": L.__version__}
    for name, scenario in SCENARIOS.items():
        records[name] = scenario(L)
    json.dump(records, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
