"""Expert Q-values of stored turns (``agentrl.env.expert``) on a corridor whose values are known
by hand: positions 0..3, the goal at 3 (reward 1, terminated), actions right / left / wait; the
expert walks right. With γ = 0.5, V^E(p) = γ^(2 − p): V(0) = 0.25, V(1) = 0.5, V(2) = 1."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.env.expert import ExpertCache, ExpertUnavailableError, expert_values, play_expert, state_key


class Corridor:
    """A deterministic 4-cell corridor with an expert (``one_at_a_time``: the expert's plan is
    one step long, so the continuation must re-plan; ``noisy``: rewards differ on replay)."""

    def __init__(self, max_turns: int = 100, one_at_a_time: bool = False, noisy: bool = False) -> None:
        self.max_turns, self.one, self.noisy, self.resets = max_turns, one_at_a_time, noisy, 0

    def reset(self, *, seed=None, options=None):
        self.pos, self.turns, self.resets = 0, 0, self.resets + 1
        return "cell 0", {"anchor_obs": "cell 0"}

    def step(self, action):
        self.pos = min(3, self.pos + 1) if action == "right" else max(0, self.pos - 1) if action == "left" else self.pos
        self.turns += 1
        won = self.pos == 3
        r = (1.0 if won else 0.0) + (0.01 * self.resets if self.noisy else 0.0)
        return f"cell {self.pos}", r, won, not won and self.turns >= self.max_turns, {"anchor_obs": f"cell {self.pos}",
                                                                                       "won": won}

    def expert_plan(self):
        return ["right"] * (1 if self.one else 3 - self.pos) if self.pos < 3 else []

    def close(self):
        pass


WON = ["left", "right", "wait", "right", "right"]  # positions 0 -> 0, 1, 1, 2, 3


def test_hand_computed_values_of_a_won_episode():
    ev = expert_values(Corridor(), WON, seed=0, rewards=[0, 0, 0, 0, 1], terminated=True, gamma=0.5)
    np.testing.assert_allclose(ev.v, [0.25, 0.25, 0.5, 0.5, 1.0, 0.0])
    np.testing.assert_allclose(ev.q, [0.125, 0.25, 0.25, 0.5, 1.0])
    np.testing.assert_allclose(ev.a, [-0.125, 0.0, -0.25, 0.0, 0.0])  # the detours cost, the expert's own steps 0
    assert ev.steps.tolist() == [3, 3, 2, 2, 1, 0] and ev.won[:5].all() and not ev.won[5]
    assert ev.replay_mismatch == 0 and ev.computed == 5


def test_truncated_episode_lets_the_expert_play_on_past_the_cut():
    ev = expert_values(Corridor(), ["wait", "left"], seed=0, rewards=[0, 0], terminated=False, gamma=0.5)
    np.testing.assert_allclose(ev.v, [0.25, 0.25, 0.25])  # V(s_2) from the expert's continuation
    np.testing.assert_allclose(ev.a, [-0.125, -0.125])


def test_replanning_gives_the_same_values_and_the_cap_stops_a_continuation():
    one = expert_values(Corridor(one_at_a_time=True), WON, seed=0, terminated=True, gamma=0.5)
    full = expert_values(Corridor(), WON, seed=0, terminated=True, gamma=0.5)
    np.testing.assert_allclose(one.v, full.v)
    env = Corridor()
    env.reset()
    capped = play_expert(env, 0.5, max_expert_steps=2)
    assert (capped.value, capped.steps, capped.won, capped.ended) == (0.0, 2, False, False)


def test_cache_shares_states_across_episodes_and_persists(tmp_path):
    cache = ExpertCache(tmp_path / "c.json")
    expert_values(Corridor(), WON, seed=0, terminated=True, gamma=0.5, cache=cache)
    again = expert_values(Corridor(), ["left", "right", "right", "right"], seed=0, terminated=True, gamma=0.5,
                          cache=cache)  # shares s_0, s_1, s_2 (prefixes [], [left], [left, right])
    assert again.computed == 1  # only s_3 (after left, right, right) is new
    np.testing.assert_allclose(again.a, [-0.125, 0.0, 0.0, 0.0])
    cache.save()
    reread = ExpertCache(tmp_path / "c.json")
    assert reread.entries == cache.entries and len(reread.entries) == 6
    # the key names the env, the seed and the continuation's settings
    assert state_key("a", 0, None, [], 0.5, 50) != state_key("b", 0, None, [], 0.5, 50)
    assert state_key("a", 0, None, [], 0.5, 50) != state_key("a", 1, None, [], 0.5, 50)
    assert state_key("a", 0, None, [], 0.5, 50) != state_key("a", 0, None, [], 0.9, 50)


def test_replay_mismatches_are_counted_not_hidden():
    ev = expert_values(Corridor(noisy=True), ["wait", "right"], seed=0, rewards=[0.0, 0.0], gamma=0.5)
    assert ev.replay_mismatch == 2  # both replayed rewards differ from the stored ones
    bad_anchor = expert_values(Corridor(), ["wait", "right"], seed=0, anchors=["cell 0", "cell 9"], gamma=0.5)
    assert bad_anchor.replay_mismatch == 1


def test_bad_input_is_refused_with_what_to_fix():
    class NoExpert(Corridor):
        expert_plan = None

    with pytest.raises(ExpertUnavailableError, match="expert_plan"):
        expert_values(NoExpert(), ["wait"], seed=0)
    with pytest.raises(ValueError, match="gamma"):
        expert_values(Corridor(), ["wait"], seed=0, gamma=0.0)
    with pytest.raises(ValueError, match="rewards has 1 entries for 2 actions"):
        expert_values(Corridor(), ["wait", "wait"], seed=0, rewards=[0.0])
