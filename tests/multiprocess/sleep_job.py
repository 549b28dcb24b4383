"""A worker that only waits (no torch import, so it starts at once): ``python sleep_job.py OUT``.

Each process writes its pid to ``OUT/pid<RANK>`` and sleeps; tests/test_launch.py interrupts the job."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    path = os.path.join(sys.argv[1], f"pid{os.environ['RANK']}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)
