"""The ``noisy_walkthrough`` scripted policy: the walkthrough with random slips (mixed outcomes
for the expert-Q credit check)."""

from __future__ import annotations

import pytest

from agentrl.rollout.scripted import NOISY_EPSILON, NoisyWalkthroughPolicy, env_kwargs_for, make_policy

INFO = {"walkthrough": ["a", "b"], "admissible_actions": ["x", "y", "z"]}


def test_epsilon_zero_is_the_walkthrough_and_one_is_random_over_admissible():
    p = NoisyWalkthroughPolicy(INFO, seed=0, epsilon=0.0)
    assert [p.act("", INFO), p.act("", INFO), p.act("", INFO)] == ["a", "b", None]
    r = NoisyWalkthroughPolicy(INFO, seed=0, epsilon=1.0)
    acts = [r.act("", INFO) for _ in range(50)]
    assert set(acts) == {"x", "y", "z"}  # the plan waits while it slips
    assert r.plan.plan == type(r.plan.plan)(["a", "b"])
    assert NoisyWalkthroughPolicy(INFO, seed=0, epsilon=1.0).act("", {"walkthrough": ["a"]}) == "a"  # nothing to slip to


def test_slips_are_seeded_per_episode_and_near_epsilon():
    def run(seed):
        p = make_policy("noisy_walkthrough", {"walkthrough": ["a"] * 400, "admissible_actions": ["x"]}, seed, 7)
        return [p.act("", {"admissible_actions": ["x"]}) for _ in range(400)]

    assert run(1) == run(1) != run(2)
    share = run(1).count("x") / 400
    assert abs(share - NOISY_EPSILON) < 0.06


def test_bad_epsilon_and_missing_walkthrough_are_refused():
    with pytest.raises(ValueError, match="epsilon"):
        NoisyWalkthroughPolicy(INFO, seed=0, epsilon=1.5)
    with pytest.raises(ValueError, match="walkthrough"):
        NoisyWalkthroughPolicy({}, seed=0)
    with pytest.raises(ValueError, match="noisy_walkthrough"):
        make_policy("noisy", INFO, 0, 0)


def test_it_builds_the_env_with_the_walkthrough_kwargs():
    pytest.importorskip("alfworld")
    assert env_kwargs_for("noisy_walkthrough", "agentrl/ALFWorld-v0", {"split": "train"}) == {"expert": True,
                                                                                              "split": "train"}
    assert env_kwargs_for("random", "agentrl/ALFWorld-v0", {}) == {}
