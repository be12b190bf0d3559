"""``studies/fidelity.py``, ``tabular_maze.py`` and ``credit_fidelity.py`` (issue 38): the
fidelity metrics on hand-built rows, the tabular policy's gradient against finite differences,
the oracle arm against the exact advantages, and one seed of the benchmark over every registered
estimator (pure NumPy, no model, no files)."""

from __future__ import annotations

import argparse
import math

import gymnasium as gym
import numpy as np
import pytest

import agentrl  # noqa: F401
from agentrl.credit import exact_advantages, exact_values, list_estimators
from agentrl.types import TurnTable
from studies.credit_fidelity import LEFT_OUT, ORACLE, aggregate, onward, run_seed
from studies.fidelity import fidelity, informative_rows, mean_ci, noise_share_by_mask, sign_vs_grpo
from studies.tabular_maze import TabularPolicy, build_batch, policy_gradient, sample_episode, true_advantages


def test_fidelity_metrics_on_hand_rows():
    kind = np.array(["junction", "junction", "junction", "filler", "filler", "junction"])
    a_true = np.array([1.0, -1.0, 0.5, 0.0, 0.0, 0.0])
    a_est = np.array([2.0, 0.0, -1.0, 1.0, -1.0, 3.0])
    onward = np.array([True, False, True, False, False, True])
    won = np.array([False, False, False, False, False, True])
    got = fidelity(a_est, a_true, kind, onward, won)
    # junction rows 0, 1, 2, 5: corr of (2, 0, -1, 3) with (1, -1, 0.5, 0)
    assert got["corr"] == pytest.approx(np.corrcoef([2, 0, -1, 3], [1, -1, 0.5, 0])[0, 1], abs=1e-12)
    # A_true != 0 on rows 0, 1, 2: signs (+,+) right, (0,-) wrong, (-,+) wrong
    assert got["sign_acc"] == pytest.approx(1 / 3)
    # onward junction choices in failed episodes: rows 0 (A 2 > 0) and 2 (A -1): one of two
    assert got["failed_credit"] == pytest.approx(0.5)
    # Var(1, -1) = 1 over Var(2, 0, -1, 3) = (1 + 1 + 4 + 4) / 4 = 2.5
    assert got["noise_share"] == pytest.approx(1 / 2.5)


def _table(group, episode, t, reward, anchor, action) -> TurnTable:
    n = len(group)
    last = np.append(np.asarray(episode)[1:] != np.asarray(episode)[:-1], True)
    return TurnTable(group=np.array(group), episode=np.array(episode), t=np.array(t), reward=np.array(reward, float),
                     terminated=last, truncated=np.zeros(n, bool), action_valid=np.ones(n, bool),
                     anchor_key=np.array(anchor), next_anchor_key=np.array(anchor), action_key=np.array(action),
                     parent=np.array([i - 1 if tt else -1 for i, tt in enumerate(t)]), episode_ok=np.ones(n, bool),
                     trainable=np.ones(n, bool), turn_id=np.arange(n))


def test_informative_rows_need_two_returns_and_two_actions():
    # group 0: episodes 0 (won) and 1 (lost) both pass anchor 5 with different actions -> informative;
    # anchor 6 is seen by both with the same action -> not; group 1: both episodes lose -> nothing is
    tb = _table(group=[0, 0, 0, 0, 1, 1], episode=[0, 0, 1, 1, 2, 3], t=[0, 1, 0, 1, 0, 0],
                reward=[0, 1, 0, 0, 0, 0], anchor=[5, 6, 5, 6, 5, 5], action=[1, 2, 3, 2, 1, 3])
    assert informative_rows(tb).tolist() == [True, False, True, False, False, False]
    adv = np.array([1.0, 1.0, -1.0, -1.0, 0.0, 0.0])
    assert sign_vs_grpo(tb, adv) == pytest.approx(0.0)  # GRPO gives the won episode +, the lost one -, group 1 zeros
    assert noise_share_by_mask(adv, informative_rows(tb)) == pytest.approx(np.var([1, -1, 0, 0]) / 1.0)


def test_mean_ci_is_a_normal_interval():
    m, lo, hi = mean_ci(np.array([1.0, 2.0, 3.0, np.nan]))
    assert m == 2.0 and hi - m == pytest.approx(1.96 * 1.0 / math.sqrt(3))
    assert math.isnan(mean_ci(np.array([1.0]))[1])


def _maze(k: int = 2, seed: int = 3):
    env = gym.make("agentrl/JunctionMaze-v0", k=k).unwrapped
    env.reset(seed=seed)
    return env.task_graph()


def test_policy_gradient_matches_finite_differences():
    graph = _maze()
    policy = TabularPolicy(cue_prior=0.7, noop_logit=-1.0)
    rng = np.random.default_rng(0)
    batch = build_batch([graph], [[sample_episode(graph, policy, rng) for _ in range(6)]])
    adv = rng.normal(size=len(batch.obs))
    grads = policy_gradient(batch, policy, adv)

    def surrogate() -> float:
        return sum(A * np.log(policy.probs(o, policy.logits[o].size)[a])
                   for o, a, A in zip(batch.obs, batch.action_index, adv)) / len(adv)
    for obs, g in grads.items():
        for i in range(g.size):
            policy.logits[obs][i] += 1e-6
            up = surrogate()
            policy.logits[obs][i] -= 2e-6
            down = surrogate()
            policy.logits[obs][i] += 1e-6
            assert g[i] == pytest.approx((up - down) / 2e-6, abs=1e-7)


def test_oracle_advantages_are_the_exact_ones_per_episode():
    graphs = [_maze(5, s) for s in range(2)]
    policy = TabularPolicy(cue_prior=1.3, noop_logit=-3.0)
    rng = np.random.default_rng(1)
    groups = [[sample_episode(g, policy, rng) for _ in range(4)] for g in graphs]
    batch = build_batch(graphs, groups)
    expect = np.concatenate([exact_advantages(g, exact_values(g, policy.state_policy(g)), ep.actions)
                             for g, eps in zip(graphs, groups) for ep in eps])
    np.testing.assert_array_equal(true_advantages(batch, policy), expect)
    # the batch's rows follow the episodes: rewards and kinds per row
    np.testing.assert_array_equal(batch.table.reward, np.concatenate([ep.rewards for eps in groups for ep in eps]))
    assert set(batch.kind[onward(batch)]) <= {"junction", "filler", "start"}


def test_one_seed_covers_every_estimator_and_the_oracle():
    args = argparse.Namespace(tasks=2, group=4, iterations=2, lr=0.7, cue_prior=1.3, noop_logit=-3.0)
    res = run_seed((5, 0, args))
    arms = [n for n in list_estimators() if n not in LEFT_OUT] + [ORACLE]
    assert set(LEFT_OUT) == {"oprl", "stepopsd"} <= set(list_estimators())  # model-based scorers' columns
    assert list(res["fidelity"]) == arms and list(res["curves"]) == arms
    assert all(len(c) == 2 for c in res["curves"].values())
    assert res["fidelity"][ORACLE]["corr"] == pytest.approx(1.0) and res["fidelity"][ORACLE]["sign_acc"] == 1.0
    # every arm sees the same first batch (same mazes, same sampling seed, same initial policy)
    assert len({c[0] for c in res["curves"].values()}) == 1
    agg = aggregate([res, run_seed((5, 1, args))], [5])["5"]
    assert agg["seeds"] == 2 and agg["learning"]["grpo"]["vs_grpo"][0] == 0.0
