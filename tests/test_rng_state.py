"""``ember.core.loop.rng``: capturing and restoring every generator a run draws from."""

from __future__ import annotations

import random

import numpy as np
import torch

from ember.core.loop import rng


def test_restoring_a_capture_replays_every_generator() -> None:
    state = rng.capture()
    drawn = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    rng.restore(state)
    again = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(drawn[0], again[0]) and np.array_equal(drawn[1], again[1]) and drawn[2] == again[2]


def test_python_random_state_is_converted_again_only_when_it_moved() -> None:
    """Most runs never draw from ``random``: a capture then reuses the tensor of the previous one (read only);
    one draw makes a new tensor, and each capture restores its own moment."""
    first = rng.capture()
    second = rng.capture()
    assert second["python"]["state"] is first["python"]["state"]
    x = random.random()
    third = rng.capture()
    assert third["python"]["state"] is not first["python"]["state"]
    assert not torch.equal(third["python"]["state"], first["python"]["state"])
    after = random.random()
    rng.restore(first)
    assert random.random() == x
    rng.restore(third)
    assert random.random() == after


def test_numpy_state_is_read_again_only_when_it_may_have_moved() -> None:
    """NumPy's words are compared as raw bytes: an unchanged generator gives the last capture back (read only), a
    draw a new one; a cached Gaussian, used up without touching the words, is always read (else a resume would
    replay it)."""
    first = rng.capture()
    if hasattr(np.random, "get_bit_generator"):  # NumPy 1.25 and later; before, the state is read every time
        assert rng._numpy.layout_checked  # the raw bytes matched get_state() on this NumPy
        assert rng.capture()["numpy"] is first["numpy"]
    np.random.rand()
    moved = rng.capture()["numpy"]
    assert moved is not first["numpy"] and moved["pos"] != first["numpy"]["pos"]
    np.random.normal()  # draws two, keeps one
    cached = rng.capture()
    assert cached["numpy"]["has_gauss"] == 1
    second = np.random.normal()  # the kept one: the words do not move
    used = rng.capture()
    assert used["numpy"]["has_gauss"] == 0 and torch.equal(used["numpy"]["keys"], cached["numpy"]["keys"])
    after = np.random.normal()
    rng.restore(cached)
    assert np.random.normal() == second
    rng.restore(used)
    assert np.random.normal() == after


def test_restoring_the_state_numpy_is_still_in_leaves_it_alone_and_a_moved_one_is_put_back(monkeypatch) -> None:
    state = rng.capture()
    calls: list[object] = []
    real = np.random.set_state
    monkeypatch.setattr(np.random, "set_state", lambda s: (calls.append(s), real(s)))
    rng.restore(state)  # nothing drawn since: as after a sanity check that used no NumPy
    assert calls == [] or not hasattr(np.random, "get_bit_generator")
    expected = np.random.rand()
    rng.restore(state)  # moved: put back
    assert len(calls) >= 1 and np.random.rand() == expected


def test_python_state_is_read_again_only_when_its_words_or_its_cached_gaussian_moved() -> None:
    """Python's words are compared as raw bytes, and ``gauss_next`` (used up without moving the words) on its own:
    an unchanged generator is not read again, a used-up Gaussian is, and each capture restores its own moment."""
    first = rng.capture()
    if rng._python.layout_checked is not None:  # CPython: the raw bytes matched getstate()
        assert rng._python.layout_checked
    random.gauss()  # draws two numbers, keeps one in gauss_next
    cached = rng.capture()
    assert cached["python"]["gauss"] is not None and cached["python"]["state"] is not first["python"]["state"]
    second = random.gauss()  # the kept one: the words do not move
    used = rng.capture()
    assert used["python"]["gauss"] is None and torch.equal(used["python"]["state"], cached["python"]["state"])
    after = random.gauss()
    rng.restore(cached)
    assert random.gauss() == second
    rng.restore(used)
    assert random.gauss() == after


def test_restoring_the_python_state_it_is_still_in_leaves_it_alone_and_a_moved_one_is_put_back(monkeypatch) -> None:
    state = rng.capture()
    calls: list[object] = []
    real = random.setstate
    monkeypatch.setattr(random, "setstate", lambda s: (calls.append(s), real(s)))
    rng.restore(state)  # nothing drawn since: as after a sanity check that used no random
    assert calls == [] or rng._python.layout_checked is not True
    expected = random.random()
    rng.restore(state)  # moved: put back
    assert len(calls) >= 1 and random.random() == expected
    loaded = {**state, "python": {**state["python"], "state": state["python"]["state"].clone()}}
    rng.restore(loaded)  # a state read from a file is another tensor: put back, whatever the generator holds
    assert len(calls) >= 2 and random.random() == expected


def test_preserved_rng_undoes_every_draw_inside_and_leaves_untouched_generators_alone(monkeypatch) -> None:
    from ember.core.loop.seed import preserved_rng

    rng.capture()
    calls: list[object] = []
    monkeypatch.setattr(random, "setstate", lambda s, real=random.setstate: (calls.append(s), real(s)))
    with preserved_rng():
        torch.rand(1)
    assert calls == [] or rng._python.layout_checked is not True
    before = rng.capture()
    expected = (torch.rand(2), np.random.rand(2), random.random())
    rng.restore(before)
    with preserved_rng():
        torch.rand(5), np.random.rand(5), random.random(), random.gauss()
    again = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(again[0], expected[0]) and np.array_equal(again[1], expected[1]) and again[2] == expected[2]
