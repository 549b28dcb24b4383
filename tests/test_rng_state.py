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
