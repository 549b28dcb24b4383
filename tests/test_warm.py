"""The warm interpreter of tests/warm.py runs a command as ``python ARGS`` in a fresh interpreter would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import atexit, os, sys, threading, time
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
print(sys.argv[1:], os.getcwd(), os.environ.get("ONLY_HERE"), sys.path[0] == os.path.dirname(__file__))
print("to stderr", file=sys.stderr)
import helper
sys.exit(int(sys.argv[1]))
"""


def test_a_script_gets_its_argv_cwd_env_path_streams_and_exit_steps(tmp_path: Path, warm_python) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.py").write_text("print('helper from PYTHONPATH')\n")
    env = {"PATH": os.environ["PATH"], "ONLY_HERE": "yes", "PYTHONPATH": str(tmp_path / "lib")}
    for code in (0, 3):
        warm = warm_python.run(["job.py", str(code)], cwd=tmp_path, env=env)
        fresh = subprocess.run([sys.executable, "job.py", str(code)], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=120)
        assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert warm.returncode == code and "atexit ran" in warm.stdout and "thread joined" in warm.stdout
    assert f"['3'] {tmp_path} yes True" in warm.stdout


def test_module_code_errors_and_interrupts_end_as_in_python(tmp_path: Path, warm_python) -> None:
    env = dict(os.environ)
    assert warm_python.run(["-c", "import sys; print(sys.argv)", "x"], cwd=tmp_path, env=env).stdout == "['-c', 'x']\n"
    error = warm_python.run(["-c", "raise ValueError('bad')"], cwd=tmp_path, env=env)
    assert error.returncode == 1
    assert error.stderr.splitlines() == ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
                                         "ValueError: bad"]
    assert warm_python.run(["-c", "raise KeyboardInterrupt"], cwd=tmp_path, env=env).returncode == -2
    assert warm_python.run(["-c", "import sys; sys.exit('why')"], cwd=tmp_path, env=env).stderr == "why\n"
    help_text = warm_python.run(["-m", "ember", "--help"], cwd=tmp_path, env=env)
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: ember")
