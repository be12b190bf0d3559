"""WebShop's expert from the current page (``WebShopEnv.expert_plan``, the expert-Q credit check):
it finishes from the target's item page, the results page listing it and any other page, and
the expert values of a detour are negative while the expert's own step costs nothing."""

from __future__ import annotations

import numpy as np

from agentrl.env.expert import expert_values, play_expert


def _play(env, actions):
    for a in actions:
        env.step(a)


def test_expert_plan_from_reset_is_the_oracle_and_wins(env):
    _, info = env.reset(seed=3)
    assert env.expert_plan() == info["walkthrough"]
    cont = play_expert(env, 0.95, 20)
    assert cont.won and cont.ended and cont.steps == len(info["walkthrough"])
    assert env.expert_plan() == []  # bought: nothing left


def test_expert_plan_mid_episode_continues_instead_of_restarting(env):
    _, info = env.reset(seed=3)
    plan = info["walkthrough"]  # search, click target, options..., buy now
    _play(env, plan[:1])
    assert env.expert_plan() == plan[1:]  # on the results page listing the target: click it, options, buy
    _play(env, plan[1:3])
    assert env.expert_plan() == plan[3:]  # on the item page: the options not chosen yet, buy
    env.step("click[< prev]")  # back to the results page: the target is listed there again
    assert env.expert_plan()[0] == plan[1]
    env.step("click[back to search]")
    assert env.expert_plan() == plan  # the search page: the whole oracle


def test_expert_values_charge_a_detour_and_not_the_oracle_steps(env):
    _, info = env.reset(seed=3)
    plan = info["walkthrough"]
    acts = [plan[0], "click[next >]", "click[< prev]", *plan[1:]]
    ev = expert_values(env, acts, seed=3, gamma=0.95, max_expert_steps=20, terminated=True)
    assert ev.replay_mismatch == 0 and ev.won[0]
    assert ev.a[1] < 0  # paging away from the target costs a step... (and the way back)
    np.testing.assert_allclose(ev.a[[0, 3]], 0.0, atol=1e-12)  # the oracle's own steps are as good as the expert's
    np.testing.assert_allclose(ev.v[0], 0.95 ** (len(plan) - 1))  # reward 1 on the last of len(plan) steps
