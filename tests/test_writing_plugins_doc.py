"""The Python examples of docs/writing-plugins.md run, in order, as one program."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "writing-plugins.md"


def test_the_examples_run(tmp_path, monkeypatch) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)  # the fits write their logs here
    namespace: dict = {"__name__": "writing_plugins_doc"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{PAGE.name} (python block {i + 1})", "exec"), namespace)
    assert namespace["timer"].steps == 8
