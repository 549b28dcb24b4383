"""Python processes started from a warm interpreter, for tests that run many short single-process commands.

A fresh interpreter spends about two seconds of CPU importing torch before it does anything; a test that runs a
command seventeen times spends half a minute on imports alone. :class:`Warm` starts one interpreter per test
process that imports torch and ember once, then forks it for each command: each command is still a process of its
own (its own pid, working directory, environment, argv, stdin/stdout/stderr, exit status), run as ``python
ARGS...`` would run it (a script, ``-m module`` or ``-c code``), with the interpreter's exit steps (threads
joined, ``atexit`` functions) before it exits.

What it does not give, so tests of these stay on fresh interpreters: the interpreter's own start (environment
variables read at import time by torch or ember, ``-X`` options) and its last steps (module teardown, the order
in which C++ destructors run at exit).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

_SERVER = r'''
import importlib, json, os, selectors, socket, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
BASE_PATH = sys.path[1:]
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(16)
print("ready", flush=True)
waiting = {}  # pid -> the connection that gets its wait status


def child(request, fds):
    import atexit, runpy, signal, threading, traceback
    listener.close()
    for conn in waiting.values():
        conn.close()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1 if unbuffered else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    args = request["args"]
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    code = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path[:] = [os.getcwd(), *extra, *BASE_PATH]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            sys.path[:] = ["", *extra, *BASE_PATH]
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = list(args)
            sys.path[:] = [os.path.dirname(os.path.abspath(args[0])), *extra, *BASE_PATH]
            runpy.run_path(os.path.abspath(args[0]), run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException as error:  # printed as python prints it: from the command's own first frame on
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        code = -2 if isinstance(error, KeyboardInterrupt) else 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if code == -2:  # as python does after an uncaught KeyboardInterrupt: end by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
while True:
    for _ in selector.select(timeout=0.02):
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            child(request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        waiting[pid] = conn
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        conn = waiting.pop(pid, None)
        if conn is not None:
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()
'''


class Warm:
    """One warm interpreter (``python``, having imported ``preload``), forked for each :meth:`run`."""

    def __init__(self, python: str = sys.executable, preload: tuple[str, ...] = ("torch", "ember")) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ember-warm-")
        self._address = os.path.join(self._dir.name, "socket")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self._server = subprocess.Popen([python, "-c", _SERVER, self._address, *preload], env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        assert self._server.stdout is not None
        ready = self._server.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the warm interpreter did not start (exit status {self._server.wait()})")

    def run(self, args: list[str], cwd: str | os.PathLike[str], env: dict[str, str], timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True)``, forked warm."""
        with tempfile.TemporaryDirectory(prefix="ember-warm-run-") as tmp:
            paths = [Path(tmp, name) for name in ("stdin", "stdout", "stderr")]
            paths[0].write_text(input or "")
            files = [open(paths[0], "rb"), open(paths[1], "wb"), open(paths[2], "wb")]
            try:
                with socket.socket(socket.AF_UNIX) as conn:
                    conn.connect(self._address)
                    request = {"args": [str(a) for a in args], "cwd": str(cwd), "env": dict(env)}
                    socket.send_fds(conn, [json.dumps(request).encode()], [f.fileno() for f in files])
                    for f in files:
                        f.close()
                    conn.settimeout(timeout)
                    reader = conn.makefile("r")
                    pid = int(reader.readline())
                    try:
                        code = int(reader.readline())
                    except TimeoutError:
                        os.kill(pid, 9)
                        raise subprocess.TimeoutExpired([sys.executable, *args], timeout) from None
            finally:
                for f in files:
                    f.close()
            return subprocess.CompletedProcess([sys.executable, *args], code, paths[1].read_text(),
                                               paths[2].read_text())

    def close(self) -> None:
        self._server.kill()
        self._server.wait()
        assert self._server.stdout is not None
        self._server.stdout.close()
        self._dir.cleanup()
