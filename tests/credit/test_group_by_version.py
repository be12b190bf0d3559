"""Staleness-aware credit (issue 37): the share of comparison groups that mix policy versions
(``version_mixing``) and group statistics per version (``group_by_version``), on a hand-built
table whose values are worked out below.

The table (reward on the last turn; anchors s0, a, b, c; all actions valid and trainable)::

    group 0   ep0  v2  s0 → a   R = 3        group 1   ep4  v1 v1  s0 → c   R = 1
              ep1  v2  s0 → b   R = 1                  ep5  v1 v2  s0 → c   R = 0   (ran across an update)
              ep2  v0  s0 → a   R = 2                  ep6  v5     s0       failed (episode_ok False)
              ep3  v0  s0 → b   R = 0

Group 0 mixes episodes of versions 2 and 0 (what ``rollout.max_staleness: 2`` allows); group 1's
episodes both started under version 1 (ep5's second turn is version 2).
"""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.config import ConfigError
from agentrl.credit import (compute_advantages, explain_advantages, register_estimator, split_by_version,
                            version_mixing)
from agentrl.credit.versions import episode_versions
from agentrl.train.checks import checked_config_from_dict
from agentrl.types import TurnTable

EPS = 1e-6  # the estimators' default eps
GAMMA = 0.95


def _table() -> TurnTable:
    #          ep0     ep1     ep2     ep3     ep4     ep5     ep6
    episode = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]
    t = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    version = [2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 2, 5]
    reward = [0, 3, 0, 1, 0, 2, 0, 0, 0, 1, 0, 0, 0]
    anchor = [0, 1, 0, 2, 0, 1, 0, 2, 0, 3, 0, 3, 0]  # s0 = 0, a = 1, b = 2, c = 3
    n = len(episode)
    return TurnTable(
        group=[0] * 8 + [1] * 5, episode=episode, t=t, reward=np.array(reward, dtype=np.float64),
        terminated=[x == 1 for x in t[:12]] + [True], truncated=[False] * n, action_valid=[True] * n,
        anchor_key=anchor, next_anchor_key=[4] * n, action_key=[0] * n,
        parent=[-1 if x == 0 else i - 1 for i, x in enumerate(t)], episode_ok=[True] * 12 + [False],
        trainable=[True] * n, turn_id=list(range(n)), policy_version=version)


def test_version_mixing_counts_the_comparison_groups_that_span_versions():
    m = version_mixing(_table())
    # episode groups with >= 2 eligible episodes: group 0 (4) and group 1 (ep4, ep5; ep6 failed) -> 2;
    # group 0's episodes started under {2, 0} -> spans; group 1's under {1, 1} -> does not
    assert (m.groups, m.groups_spanning) == (2, 1)
    # by the turns' own versions group 1 has {1, 2} too (ep5's second turn)
    assert m.groups_spanning_turns == 2
    # step groups with >= 2 eligible rows: (0,s0) eps 0-3, (0,a) eps 0,2, (0,b) eps 1,3 -> all span {0, 2};
    # (1,s0) and (1,c) rows of ep4, ep5 -> episode version 1 only
    assert (m.anchor_groups, m.anchor_groups_spanning) == (5, 3)
    assert (m.turns, m.turns_spanning, m.version_span_max) == (12, 8, 2)  # group 0: versions 0..2
    assert m.as_metrics() == {"adv/groups_span_versions": 0.5, "adv/groups_span_turn_versions": 1.0,
                              "adv/anchor_groups_span_versions": 0.6, "adv/turns_in_version_spanning_groups": 8 / 12,
                              "adv/group_version_span_max": 2.0}


def test_split_by_version_leaves_no_group_spanning_versions():
    table = _table()
    assert episode_versions(table).tolist() == [2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 5]  # ep5: oldest turn
    split = split_by_version(table)
    m = version_mixing(split)
    assert (m.groups, m.groups_spanning, m.anchor_groups_spanning) == (3, 0, 0)  # group 0 is now two groups
    assert m.groups_spanning_turns == 1  # ep5 still holds versions 1 and 2: one episode, one group
    # group ids: (0, v2), (0, v0), (1, v1), (1, v5) are four distinct groups; everything else unchanged
    assert len({(int(g)) for g in split.group}) == 4
    assert split.group[0] == split.group[2] != split.group[4] == split.group[6] and split.group[8] == split.group[10]
    assert np.array_equal(split.anchor_key, table.anchor_key) and np.array_equal(split.reward, table.reward)


def test_grpo_per_version_by_hand():
    table = _table()
    pooled = compute_advantages(table, "grpo")
    per = compute_advantages(table, "grpo", group_by_version=True)
    # pooled group 0, stats over steps: scores per row [3,3,1,1,2,2,0,0], mean 1.5,
    # unbiased var = (2·2.25 + 2·0.25 + 2·0.25 + 2·2.25) / 7 = 10/7
    sd = np.sqrt(10 / 7) + EPS
    want_pooled = np.repeat([1.5 / sd, -0.5 / sd, 0.5 / sd, -1.5 / sd], 2)
    # per version: {ep0: 3, ep1: 1} rows [3,3,1,1], mean 2, var 4/3; {ep2: 2, ep3: 0} rows [2,2,0,0], mean 1, var 4/3
    s = np.sqrt(4 / 3) + EPS
    want_per = np.repeat([1 / s, -1 / s, 1 / s, -1 / s], 2)
    np.testing.assert_allclose(pooled[:8], want_pooled, rtol=0, atol=1e-12)
    np.testing.assert_allclose(per[:8], want_per, rtol=0, atol=1e-12)
    # group 1's eligible episodes share one version: the same advantages either way (ep6 failed: 0)
    np.testing.assert_array_equal(per[8:], pooled[8:])
    assert per[12] == 0.0


def test_gigpo_per_version_by_hand():
    table = _table()
    pooled = compute_advantages(table, "gigpo", gamma=GAMMA)
    per = compute_advantages(table, "gigpo", gamma=GAMMA, group_by_version=True)
    g = GAMMA
    # episode term as GRPO's (above)
    sd, s = np.sqrt(10 / 7) + EPS, np.sqrt(4 / 3) + EPS
    ep_pooled = np.array([1.5, -0.5, 0.5, -1.5]) / sd
    ep_per = np.array([1, -1, 1, -1]) / s
    # step term, returns R_t0 = γ·R, R_t1 = R.
    # pooled: (0,s0) γ·[3,1,2,0], mean 1.5γ, var 5γ²/3; (0,a) [3,2] and (0,b) [1,0]: mean ±0.5, var 0.5
    step_t0 = g * np.array([1.5, -0.5, 0.5, -1.5]) / (g * np.sqrt(5 / 3) + EPS)
    step_t1 = np.array([0.5, 0.5, -0.5, -0.5]) / (np.sqrt(0.5) + EPS)
    want_pooled = np.ravel(np.column_stack([ep_pooled + step_t0, ep_pooled + step_t1]))
    # per version: (0,v2,s0) γ·[3,1] and (0,v0,s0) γ·[2,0]: each mean ± γ, var 2γ²;
    # (0,v,a) and (0,v,b) hold one row each: singleton step groups -> 0
    step_t0 = g * np.array([1, -1, 1, -1]) / (g * np.sqrt(2) + EPS)
    want_per = np.ravel(np.column_stack([ep_per + step_t0, ep_per]))
    np.testing.assert_allclose(pooled[:8], want_pooled, rtol=0, atol=1e-12)
    np.testing.assert_allclose(per[:8], want_per, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(per[8:], pooled[8:])


@pytest.mark.parametrize("name", ["grpo", "gigpo", "hgpo", "g2po", "graphgpo"])
def test_per_version_equals_the_estimator_on_each_version_alone(name):
    """Statistics per version = the estimator run on each version's episodes as a table of their own."""
    table = _table()
    per = compute_advantages(table, name, group_by_version=True)
    version = episode_versions(table)
    for v in np.unique(version):
        rows = np.flatnonzero(version == v)
        np.testing.assert_allclose(per[rows], compute_advantages(table.take(rows), name), rtol=0, atol=1e-12)


def test_per_version_is_independent_of_row_order_and_matches_its_breakdown():
    table = _table()
    perm = np.random.default_rng(0).permutation(len(table))
    per = compute_advantages(table, "gigpo", group_by_version=True)
    np.testing.assert_array_equal(compute_advantages(table.take(perm), "gigpo", group_by_version=True), per[perm])
    total = explain_advantages(table, "gigpo", group_by_version=True).total()
    np.testing.assert_allclose(total, per, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["tree_grpo", "rtpo", "turn_ppo"])
def test_estimators_not_keyed_by_task_group_refuse_it(name):
    with pytest.raises(ValueError, match="algorithm.group_by_version: false"):
        compute_advantages(_table(), name, group_by_version=True)
    raw = {"env": {"id": "agentrl/Toy-v0"}, "algorithm": {"estimator": name, "group_by_version": True}}
    with pytest.raises(ConfigError, match="algorithm.group_by_version"):
        checked_config_from_dict(raw)


def test_it_needs_the_policy_version_column_and_a_free_name():
    import dataclasses

    bare = dataclasses.replace(_table(), policy_version=None)
    compute_advantages(bare, "grpo")  # without the option the column is not needed
    with pytest.raises(ValueError, match="policy_version"):
        compute_advantages(bare, "grpo", group_by_version=True)
    with pytest.raises(ValueError, match="policy_version"):
        version_mixing(bare)
    with pytest.raises(TypeError, match="reserved"):
        register_estimator("_bad_reserved")(lambda table, *, group_by_version=False: np.zeros(len(table)))
