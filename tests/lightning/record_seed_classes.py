"""Records what Lightning calls on recording subclasses of its Precision, MixedPrecision, CPUAccelerator and
SingleDeviceStrategy during a tiny CPU fit (tests/lightning/seed_scenarios.py), for tests/test_lightning_seed.py.

Run in an environment with Lightning installed (not a dependency of ember), from the repository root:
    python tests/lightning/record_seed_classes.py > tests/lightning/seed_classes.json
"""

from __future__ import annotations

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import seed_scenarios  # noqa: E402


def main() -> None:
    warnings.simplefilter("ignore")
    import lightning

    print(json.dumps({"lightning": lightning.__version__, "recorded": seed_scenarios.record("lightning.pytorch")},
                     indent=1))


if __name__ == "__main__":
    main()
