"""Whether the running script keeps its training under ``if __name__ == "__main__":``.

A process that ``multiprocessing`` starts from a forkserver (or by spawning) imports the running script again, as
its ``__main__``. A script whose top-level code runs the fit outside such a block would then train a second time
inside that process: the checkpoint writer process is not started for it (see
:mod:`ember.core.checkpointing.writer_process`).
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import types


def unguarded_script_line() -> int | None:
    """The line of the running script (``__main__``, from a file) whose top-level code, outside an
    ``if __name__ == "__main__":`` block, is running this fit, or None (a guarded block, an interactive session,
    no such frame). A new process imports the script again, as multiprocessing does: unguarded, that import would
    run the whole training a second time inside the writer process."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    here = inspect.currentframe()
    frame: types.FrameType | None = here.f_back if here is not None else None
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if path is None or frame is None:
        return None
    guards = _main_guards(path)
    if guards is None:
        return None
    line = frame.f_lineno
    return None if any(start <= line <= end for start, end in guards) else line


#: The lines of each script's ``if __name__ == "__main__":`` blocks, by (path, modification time, size): a script
#: is parsed once, not at every fit.
_GUARDS: dict[tuple[str, int, int], tuple[tuple[int, int], ...]] = {}


def _main_guards(path: str) -> tuple[tuple[int, int], ...] | None:
    """The first and last lines of each ``if __name__ == "__main__":`` block of the script at ``path`` (None: it
    cannot be read or parsed)."""
    try:
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in _GUARDS:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            _GUARDS[key] = tuple((node.lineno, node.end_lineno or 0) for node in ast.walk(tree)
                                 if isinstance(node, ast.If) and _is_main_test(node.test))
    except (OSError, SyntaxError, ValueError):
        return None
    return _GUARDS[key]


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and \
        any(isinstance(a, ast.Constant) and a.value == "__main__" for a in sides)
