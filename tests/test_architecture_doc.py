"""docs/architecture.md stays true: every hook its batch path names exists, and every module its layer map names is
there. (Its Python example runs with the other documentation blocks: conftest.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import ember
from ember.hookspecs.reference import spec_names

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
FENCE = "`" * 3


def blocks(language: str) -> list[str]:
    return re.findall(rf"^{FENCE}{language}\n(.*?)^{FENCE}$", PAGE, flags=re.S | re.M)


def test_every_hook_on_the_batch_path_exists() -> None:
    path = blocks("")[1]
    roles = set(re.findall(r"(?<![.\w])([a-z_]+)\(\)", path))  # model.eval() is torch's, not a hook
    events = set(re.findall(r"\b(on_[a-z_]+)\b", path))
    named = roles | events
    assert len(events) > 25, events
    unknown = sorted(n for n in named if n not in spec_names())
    assert not unknown, f"docs/architecture.md names hooks that do not exist: {unknown}"
    for generic in ("setup", "teardown", "prepare_data", "configure_model"):
        assert generic in spec_names() and generic in path


def test_every_module_on_the_layer_map_exists() -> None:
    layers = blocks("")[0]
    for name in re.findall(r"\b([a-z_]+\.py)\b", layers):
        assert list(Path(ember.__file__).parent.rglob(name)), f"docs/architecture.md names {name}, which is gone"


def test_the_layer_map_shows_the_rooms_of_core() -> None:
    """The map's rooms are ember/core's folders, and each module sits under the room that holds it."""
    import ember.core

    layers = blocks("")[0]
    core_part = layers[layers.index(" ember/core "):layers.index(" ember/hookspecs ")]
    shown = re.findall(r"^   ([a-z_]+)/ ", core_part, flags=re.M)
    assert sorted(shown) == sorted(ember.core.ROOMS), shown
    for room, section in zip(shown, re.split(r"^   [a-z_]+/ .*$", core_part, flags=re.M)[1:]):
        for name in re.findall(r"\b([a-z_]+)\.py\b", section):
            if name == "errors":
                continue
            assert (Path(ember.__file__).parent / "core" / room / f"{name}.py").exists(), \
                f"docs/architecture.md shows {name}.py in core/{room}/, which does not hold it"
