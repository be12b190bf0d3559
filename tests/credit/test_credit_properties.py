"""Registry-wide properties: shape, finiteness, permutation equivariance, ties, singletons,
determinism, and PITFALLS P5 / P6 for every registered estimator."""

from __future__ import annotations

import numpy as np
import pytest
from credit_tables import estimator_table, make_table

from agentrl.credit import compute_advantages, get_estimator, list_estimators
from agentrl.types import TurnTable

EPS = 1e-6
STEP_ESTIMATORS = ["grpo", "grpo_mean", "dr_grpo", "gigpo", "hgpo", "g2po", "graphgpo", "bipace", "beacon"]
STEP_ESTIMATORS += ["threespo"]
# OPRL (§17) and StepOPSD (§18) read step scorers' columns; make_table fills them as at iteration 0 (every
# prm_logratio 0, no gap scored), random tables with random values (credit_tables.random_scores)
STEP_ESTIMATORS += ["oprl", "stepopsd"]


def test_every_registered_estimator_is_covered():
    assert set(list_estimators()) == set(STEP_ESTIMATORS) | {"tree_grpo", "rtpo", "turn_ppo", "hiper"}


@pytest.mark.parametrize("name", sorted(set(STEP_ESTIMATORS) | {"tree_grpo", "rtpo", "turn_ppo", "hiper"}))
def test_shape_finite_deterministic_equivariant(name):
    for seed in range(15):
        tb = estimator_table(name, seed)
        out = compute_advantages(tb, name)
        assert out.shape == (len(tb),) and out.dtype == np.float64 and np.isfinite(out).all()
        np.testing.assert_array_equal(out, compute_advantages(tb, name))
        perm = np.random.default_rng(seed + 99).permutation(len(tb))
        np.testing.assert_allclose(compute_advantages(tb.take(perm), name), out[perm], atol=1e-12, rtol=0)
        bad = ~(tb.episode_ok & tb.trainable)
        assert np.all(out[bad] == 0.0), "failed / non-trainable rows must get exactly 0"


def _identical_group(n_eps: int, rewards=(0, 0, 10), valid=(1, 1, 1)) -> TurnTable:
    rows = []
    for e in range(n_eps):
        for t, (r, v) in enumerate(zip(rewards, valid)):
            rows.append(("g", f"e{e}", t, f"s{t}", "act", r, int(t == len(rewards) - 1), v, f"s{t + 1}", [1.0, t, 0.0]))
    return make_table(rows)


@pytest.mark.parametrize("name", STEP_ESTIMATORS)
def test_all_equal_group_gives_exactly_zero(name):
    # §0.5 N5: 6 (and 7) identical successful rollouts of length 3 → exactly 0, not −0.466.
    # G2PO is the exception by design: its component 2 compares the TD gains of the steps
    # *along* a trajectory (§5.3 step 5), which differ even when all rollouts agree; it is
    # 0 when all rollouts fail (§5.5).
    for n in (2, 6, 7):
        failed = compute_advantages(_identical_group(n, rewards=(0, 0, 0)), name)
        np.testing.assert_array_equal(failed, np.zeros(3 * n))
        if name != "g2po":
            np.testing.assert_array_equal(compute_advantages(_identical_group(n), name), np.zeros(3 * n))


def test_all_equal_tree_and_branch_groups_give_zero():
    tree = TurnTable(group=[0] * 4, episode=[0, 1, 2, 3], t=[0, 1, 0, 1], reward=[0, 1, 0, 1],
                     terminated=[0] * 4, truncated=[0] * 4, action_valid=[1] * 4, anchor_key=[0] * 4,
                     next_anchor_key=[0] * 4, action_key=[0] * 4, parent=[-1, 0, -1, 2], episode_ok=[1] * 4,
                     trainable=[1] * 4, turn_id=[0, 1, 2, 3], tree=[0, 0, 1, 1])
    # two trees with one leaf each: inter ties (0), intra is a singleton → kept: 1/(1+eps)
    np.testing.assert_allclose(compute_advantages(tree, "tree_grpo"), [1 / (1 + EPS)] * 4, atol=1e-12)
    both = TurnTable(**{**tree.__dict__, "tree": np.zeros(4, np.int64)})
    np.testing.assert_array_equal(compute_advantages(both, "tree_grpo"), np.zeros(4))
    rt = TurnTable(**{**both.__dict__, "tree": None, "parent": np.full(4, -1), "branch": [5, -1, 5, -1]})
    np.testing.assert_array_equal(compute_advantages(rt, "rtpo"), np.zeros(4))


SINGLETON = {  # one group holding one 1-step episode with reward 3 (§1.4)
    "grpo": 3 / (1 + EPS), "grpo_mean": 3.0, "dr_grpo": 3.0, "gigpo": 3 / (1 + EPS), "hgpo": 0.0,
    "g2po": 3 / (1 + EPS), "graphgpo": 3 / (1 + EPS), "bipace": 3 / (1 + EPS),
    "beacon": 3.0,  # mean_norm by default (§15.4); its segment singleton gives 0
    "threespo": 0.0,  # step-level singleton; no episode term by default (§16.3)
    "oprl": 3 / (1 + EPS),  # the episode term keeps the value; a single step row gives A_S = 0 (§17.6)
    "stepopsd": 3 / (1 + EPS),  # GRPO's value, no gap scored: W = 1 (§18.4)
}


@pytest.mark.parametrize("name", STEP_ESTIMATORS)
def test_singleton_group_rule(name):
    tb = make_table([("g", "e", 0, "s", "a", 3.0, 1, 1, "x", [1.0, 0.0])])
    np.testing.assert_allclose(compute_advantages(tb, name), [SINGLETON[name]], atol=1e-12, rtol=0)


def test_singleton_tree_and_branch():
    one = TurnTable(group=[0], episode=[0], t=[0], reward=[2.0], terminated=[1], truncated=[0], action_valid=[1],
                    anchor_key=[0], next_anchor_key=[0], action_key=[0], parent=[-1], episode_ok=[1],
                    trainable=[1], turn_id=[0], branch=[0])
    # one tree per question: inter and intra coincide → 2 · score/(1+eps) (§7.4)
    np.testing.assert_allclose(compute_advantages(one, "tree_grpo"), [2 * 2 / (1 + EPS)], atol=1e-12)
    np.testing.assert_array_equal(compute_advantages(one, "rtpo"), [0.0])  # step-level singleton → 0


def _p5_table(unscored_reward: float) -> TurnTable:
    # PITFALLS P5: two no-op siblings never scored, two failed with reward −1
    rows = [("g", f"e{i}", 0, "s", "act", r, 1, 1, "x", [1.0, 0.0]) for i, r in
            enumerate([unscored_reward, unscored_reward, -1.0, -1.0])]
    return make_table(rows, episode_ok=[False, False, True, True])


@pytest.mark.parametrize("name", STEP_ESTIMATORS)
def test_pitfall_p5_unscored_episodes_are_excluded(name):
    out = compute_advantages(_p5_table(0.0), name)
    np.testing.assert_array_equal(out, np.zeros(4))  # failed siblings tie → exactly 0; unscored get 0
    np.testing.assert_array_equal(compute_advantages(_p5_table(123.0), name), out)


def _p6_tables(name: str, seed: int) -> tuple[TurnTable, TurnTable]:
    tb = estimator_table(name, seed)
    eps = np.unique(tb.episode)
    if name == "tree_grpo":  # a rejected leaf row (an internal node's reward is part of its leaves' score)
        eps = np.setdiff1d(eps, tb.episode[tb.parent[tb.parent >= 0]])
    victim = eps[np.random.default_rng(seed).integers(eps.size)]
    rows = tb.episode == victim
    trainable = np.where(rows, False, tb.trainable)
    a = TurnTable(**{**tb.__dict__, "trainable": trainable})
    b = TurnTable(**{**tb.__dict__, "trainable": trainable, "reward": np.where(rows, tb.reward + 7.5, tb.reward)})
    return a, b


@pytest.mark.parametrize("name", STEP_ESTIMATORS + ["turn_ppo", "tree_grpo", "hiper"])
def test_pitfall_p6_excluded_rows_do_not_move_baselines(name):
    for seed in range(10):
        a, b = _p6_tables(name, seed)
        np.testing.assert_array_equal(compute_advantages(a, name), compute_advantages(b, name))


def test_requires_metadata():
    assert get_estimator("bipace").requires == ("hidden",)
    assert get_estimator("turn_ppo").requires == ("value",)
    assert get_estimator("rtpo").requires == ("branch",)
    assert get_estimator("gigpo").requires == ()
    assert get_estimator("threespo").requires == ("state_stats",)
    assert get_estimator("hiper").requires == ("switch", "subgoal_key", "value_low", "value_high")
    assert get_estimator("oprl").requires == ("prm_logratio",)
    assert get_estimator("oprl").declares.scorers == ("prm",)
    assert get_estimator("stepopsd").requires == ("gap",)
    assert get_estimator("stepopsd").declares.scorers == ("hindsight",)


def test_empty_table_gives_empty_output():
    import dataclasses

    from credit_tables import batch12

    empty = dataclasses.replace(batch12().take(np.zeros(0, np.int64)), value=np.zeros(0), branch=np.zeros(0, np.int64),
                                milestone=np.zeros(0, bool), switch=np.zeros(0, bool), subgoal_key=np.zeros(0, np.int64),
                                value_low=np.zeros(0), value_high=np.zeros(0), value_term=np.zeros(0))
    for name in list_estimators():
        out = compute_advantages(empty, name)
        assert out.shape == (0,) and out.dtype == np.float64
