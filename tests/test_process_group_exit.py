"""A process that still holds its trainers and models at exit frees its process group all the same: ember's exit
handler joins the backend's threads before the interpreter shuts down (a backend thread that needs the GIL
during shutdown aborts the process: docs/reliability.md, "A finished process exits cleanly")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dist_support import SCRIPTS, fsdp_available, run


@pytest.mark.slow
def test_backend_threads_are_joined_before_interpreter_shutdown(tmp_path: Path) -> None:
    strategies = ["ddp", "fsdp"] if fsdp_available() else ["ddp"]
    run([sys.executable, str(SCRIPTS / "exit_job.py"), str(tmp_path), *strategies], cwd=tmp_path, timeout=120)
    during = json.loads((tmp_path / "during.json").read_text())["threads"]
    after = json.loads((tmp_path / "threads.json").read_text())["threads"]
    if during is None:
        pytest.skip("threads are read from /proc (Linux)")
    if not during:  # the backends of older torch versions (2.4) leave their threads unnamed
        pytest.skip("this torch's gloo backend does not name its threads, so they cannot be told apart")
    assert after == []
