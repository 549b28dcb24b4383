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
