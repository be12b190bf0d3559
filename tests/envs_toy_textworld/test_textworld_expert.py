"""TextWorld's expert from the current state (``policy_commands``, the expert-Q credit check)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from agentrl.env import make
from agentrl.env.expert import META_EXPERT_KWARGS, expert_values
from agentrl.env.registry import env_metadata

pytestmark = pytest.mark.skipif(importlib.util.find_spec("textworld") is None,
                                reason="textworld extra not installed (pip install 'agentrl[textworld]')")
ID = "agentrl/TextWorld-CU1-v0"


def test_expert_plan_follows_the_state_and_needs_the_expert_kwarg():
    env = make(ID, **env_metadata(ID)[META_EXPERT_KWARGS], max_turns=40).unwrapped
    try:
        _, info = env.reset(seed=3)
        assert env.expert_plan() == info["walkthrough"] == ["take textbook"]
        env.step("go west")  # leave the room: the plan now starts by coming back
        plan = env.expert_plan()
        assert plan[-1] == "take textbook" and len(plan) == 2
        for a in plan:
            _, r, term, _, step_info = env.step(a)
        assert term and step_info["won"] and r == 1.0 and env.expert_plan() == []
    finally:
        env.close()
    plain = make(ID).unwrapped
    try:
        plain.reset(seed=3)
        with pytest.raises(RuntimeError, match="expert=True"):
            plain.expert_plan()
    finally:
        plain.close()


def test_expert_values_of_a_detour_on_a_real_game():
    env = make(ID, expert=True, max_turns=40).unwrapped
    try:
        ev = expert_values(env, ["go west", "go east", "take textbook"], seed=3, rewards=[0.0, 0.0, 1.0],
                           terminated=True, gamma=0.95)
    finally:
        env.close()
    assert ev.replay_mismatch == 0
    np.testing.assert_allclose(ev.v, [1.0, 0.95, 1.0, 0.0])
    np.testing.assert_allclose(ev.a, [0.95 * 0.95 - 1.0, 0.0, 0.0])  # the detour costs two steps' discount
