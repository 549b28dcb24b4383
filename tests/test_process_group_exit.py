"""A process that still holds its trainers and models at exit frees its process group all the same: ember's exit
handler joins the backend's threads before the interpreter shuts down (a backend thread that needs the GIL
during shutdown aborts the process: docs/reliability.md, "A finished process exits cleanly")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dist_support import SCRIPTS, clean_env, fsdp_available, run


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


#: How many times the 2-process job runs: the abort this guards against came about once in 20 runs before the exit
#: handler (docs/reliability.md, "A finished process exits cleanly").
RUNS = 20


@pytest.mark.slow
@pytest.mark.extended  # 40 worker starts; the mechanism is held by the test above in every run
def test_a_two_process_ember_run_job_exits_with_status_0_every_time(tmp_path: Path, warm_python) -> None:
    """A 2-process ``ember run`` job that keeps its trainer and model to the end, run 20 times in a row: every run
    exits with status 0 (a worker that aborts at interpreter exit, "terminate called without an active
    exception", makes the launcher exit with 1). The job is the smallest DDP validation with an all-reduce: each run costs
    the worker processes' start-up (importing torch) and little else. The workers, whose exit this is about, are
    fresh interpreters; the launcher is forked from the warm one (tests/warm.py), which saves a third of the
    cost."""
    args = ["-m", "ember.cli", "run", "--nproc-per-node", "2", str(SCRIPTS / "exit_status_job.py")]
    failed = []
    for attempt in range(1, RUNS + 1):
        result = warm_python.run(args, cwd=tmp_path, env=clean_env(), timeout=120)
        out = result.stdout + result.stderr
        if result.returncode != 0 or "terminate called" in out:
            failed.append(f"run {attempt}: exit status {result.returncode}\n{out[-3000:]}")
    assert not failed, f"{len(failed)} of {RUNS} runs failed:\n" + "\n".join(failed)
