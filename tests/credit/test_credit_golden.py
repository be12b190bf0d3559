"""Every worked example of ALGORITHMS.md (§2.5–§11) and PITFALLS P4, to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
from credit_tables import batch12, make_table

from agentrl.credit import compute_advantages, rtpo_update_order, token_gae, tree_grpo_nodes, turn_gae_returns
from agentrl.types import TurnTable

TOL = 1e-6

GRPO_STEPS = [0.724556] * 3 + [-1.201174, -1.220431, -1.201174] + [0.724556] * 2 + [0.774597] * 6 + [-1.161895] * 4
GRPO_TRAJ = [0.577350] * 3 + [-1.154700, -1.172021, -1.154700] + [0.577350] * 2 + [0.577350] * 6 + [-1.154700] * 4
DR_GRPO = [3.7625] * 3 + [-6.2375, -6.3375, -6.2375] + [3.7625] * 2 + [4.0] * 6 + [-6.0] * 4

GIGPO_STD = [1.256970, 0.017451, 0.724556, -2.354737, -1.220431, -1.201174, 1.345705, 1.431661, 1.261268,
             1.307010, 1.395746, 0.774597, 1.438103, 0.774597, -2.312073, -2.315458, -1.161895, -1.161895]
GIGPO_MEAN = [6.612500, 3.512500, 3.762500, -12.412500, -6.337500, -6.237500, 7.087500, 4.012500, 6.549167,
              6.850000, 7.325000, 4.000000, 7.475417, 4.000000, -12.024583, -12.175000, -6.000000, -6.000000]
HGPO = [0.652071, -0.999996, 0, -1.412820, 0, 0, 0.760749, 0.999996, 0.596049, 0.860828, 0.760749, 0, 0.812625,
        0, -1.408674, -1.165128, 0, 0]
G2PO = [2.381122, -0.004389, 0.794216, -4.505320, -1.325058, -1.305801, 2.381122, 1.584107, 0.143705, 0.821688,
        2.968464, 0.857530, 3.264476, 0.857530, -1.792786, -4.580513, -1.270047, -1.270047]
GRAPHGPO = [1.301905, 0.017449, 0.724556, -2.355873, -1.220431, -1.201174, 1.301905, 1.431663, 0.197247,
            0.281400, 1.925387, 0.774597, 1.929295, 0.774597, -1.739244, -1.819490, -1.161895, -1.161895]
BIPACE = [1.301338, 1.256970, 0.724556, -2.354737, -1.220431, -2.354737, 1.301338, 1.345705, 0.442843,
          1.307010, 1.395746, 0.774597, 1.438103, 0.774597, -1.493648, -2.315458, -1.161895, -1.161895]

CASES = [
    ("grpo", {}, GRPO_STEPS),
    ("grpo", {"stats_over": "trajectories"}, GRPO_TRAJ),
    ("grpo_mean", {}, DR_GRPO),
    ("dr_grpo", {}, DR_GRPO),
    ("gigpo", {"gamma": 0.95, "step_advantage_w": 1.0, "mode": "mean_std_norm"}, GIGPO_STD),
    ("gigpo", {"mode": "mean_norm"}, GIGPO_MEAN),
    ("hgpo", {"history_length": 2, "length_weight_alpha": 1.0, "base_group": False}, HGPO),
    ("g2po", {"mode": "mean_std_norm"}, G2PO),
    ("graphgpo", {"gamma": 0.1}, GRAPHGPO),
    ("bipace", {}, BIPACE),
]


@pytest.mark.parametrize("name,kwargs,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_worked_example_batch12(name, kwargs, expected):
    np.testing.assert_allclose(compute_advantages(batch12(), name, **kwargs), expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("name,kwargs,expected", CASES[:6], ids=[f"{c[0]}-shuffled-{i}" for i, c in enumerate(CASES[:6])])
def test_worked_example_row_order_irrelevant(name, kwargs, expected):
    perm = np.random.default_rng(0).permutation(18)
    out = compute_advantages(batch12().take(perm), name, **kwargs)
    np.testing.assert_allclose(out, np.asarray(expected)[perm], atol=TOL, rtol=0)


def _tree_table() -> TurnTable:
    # §7.5: T1: a -> b (leaf); a -> c; c -> d, e (leaves). T2: f -> g, h (leaves).
    names = ["a", "b", "c", "d", "e", "f", "g", "h"]
    parent = [-1, 0, 0, 2, 2, -1, 5, 5]
    reward = [0, 0, 0, 1, 0, 0, 1, 1]
    depth = [0, 1, 1, 2, 2, 0, 1, 1]
    n = len(names)
    return TurnTable(group=[0] * n, episode=list(range(n)), t=depth, reward=reward, terminated=[False] * n,
                     truncated=[False] * n, action_valid=[True] * n, anchor_key=list(range(n)),
                     next_anchor_key=list(range(n)), action_key=[0] * n, parent=parent, episode_ok=[True] * n,
                     trainable=[True] * n, turn_id=list(range(n)), tree=[1, 1, 1, 1, 1, 2, 2, 2])


def test_tree_grpo_worked_example():
    res = tree_grpo_nodes(_tree_table())
    leaf = np.array([1, 3, 4, 6, 7])
    np.testing.assert_array_equal(np.flatnonzero(res.is_leaf), leaf)
    np.testing.assert_allclose(res.leaf_advantage[leaf], [-1.672792, 1.884994, -1.672792, 0.730295, 0.730295], atol=TOL)
    np.testing.assert_allclose(res.adv_sum[[0, 2, 5]], [-1.460591, 0.212202, 1.460591], atol=TOL)
    np.testing.assert_array_equal(res.leaf_count[[0, 2, 5]], [3, 2, 2])
    np.testing.assert_allclose(res.adv_mean[[0, 2, 5]], [-0.486864, 0.106101, 0.730295], atol=TOL)
    out = compute_advantages(_tree_table(), "tree_grpo")
    np.testing.assert_allclose(out[leaf], res.leaf_advantage[leaf], atol=0)
    np.testing.assert_allclose(out[[0, 2, 5]], [-1.460591, 0.212202, 1.460591], atol=TOL)
    np.testing.assert_allclose(compute_advantages(_tree_table(), "tree_grpo", node_weight="mean")[[0, 2, 5]],
                               [-0.486864, 0.106101, 0.730295], atol=TOL)
    # without the tree column the root ancestor (a / f) identifies the tree: same numbers
    no_tree = TurnTable(**{**_tree_table().__dict__, "tree": None})
    np.testing.assert_allclose(compute_advantages(no_tree, "tree_grpo"), out, atol=0)


def rtpo_table() -> TurnTable:
    """§9.4: base A-1 rewards [0, 0, 10]; branch at turn 2 (A-1@2 = branch 7) with c1 [0, 0],
    c2 [0, 10]; branch at turn 0 (A-1@0 = branch 3) with c1 [0, 10], c2 [0, 0, 0]."""
    rows = []  # (episode, t, reward, branch, parent)
    rows += [(0, 0, 0, 3, -1), (0, 1, 0, -1, 0), (0, 2, 10, 7, 1)]          # base
    rows += [(1, 2, 0, 7, 1), (1, 3, 0, -1, 3)]                            # A-1@2 c1
    rows += [(2, 2, 0, 7, 1), (2, 3, 10, -1, 5)]                           # A-1@2 c2
    rows += [(3, 0, 0, 3, -1), (3, 1, 10, -1, 7)]                          # A-1@0 c1
    rows += [(4, 0, 0, 3, -1), (4, 1, 0, -1, 9), (4, 2, 0, -1, 10)]        # A-1@0 c2
    n = len(rows)
    col = lambda j: [r[j] for r in rows]  # noqa: E731
    return TurnTable(group=[0] * n, episode=col(0), t=col(1), reward=col(2), terminated=[False] * n,
                     truncated=[False] * n, action_valid=[True] * n, anchor_key=[0] * n, next_anchor_key=[0] * n,
                     action_key=[0] * n, parent=col(4), episode_ok=[True] * n, trainable=[True] * n,
                     turn_id=list(range(n)), branch=col(3))


def test_rtpo_worked_example():
    out = compute_advantages(rtpo_table(), "rtpo", gamma=0.95, mode="mean_std_norm")
    expected = np.zeros(12)
    expected[[2, 3, 5]] = [0.621149, -1.153563, 0.532414]     # A-1@2: base, c1, c2
    expected[[0, 7, 9]] = [0.532414, 0.621149, -1.153563]     # A-1@0: base, c1, c2
    np.testing.assert_allclose(out, expected, atol=TOL)
    np.testing.assert_array_equal(rtpo_update_order(rtpo_table()), [7, 3])


def _turn_table(value, bootstrap, reward, done):
    n = len(reward)
    ep = [0, 0, 0, 1, 1, 1]
    return TurnTable(group=[0] * n, episode=ep, t=[0, 1, 2, 0, 1, 2], reward=reward, terminated=done,
                     truncated=[False] * 5 + [True], action_valid=[True] * n, anchor_key=[0] * n,
                     next_anchor_key=[0] * n, action_key=[0] * n, parent=[-1] * n, episode_ok=[True] * n,
                     trainable=[True] * n, turn_id=list(range(n)), value=value, bootstrap_value=bootstrap)


def test_turn_ppo_worked_example():
    tb = _turn_table([5, 6, 8, 5, 3, 4], [0, 0, 0, 0, 0, 2.0], [0, 0, 10, 0, 0, 0],
                     [False, False, True, False, False, False])
    res = turn_gae_returns(tb, gamma=0.99, lam=0.9)
    np.testing.assert_allclose(res.advantages, [4.238482, 3.702, 2.0, -2.778280, -0.83982, -2.02], atol=TOL)
    np.testing.assert_allclose(res.returns, [9.238482, 9.702, 10.0, 2.221720, 2.16018, 1.98], atol=TOL)
    np.testing.assert_allclose(compute_advantages(tb, "turn_ppo", gamma=0.99, lam=0.9), res.advantages, atol=0)
    white = compute_advantages(tb, "turn_ppo", gamma=0.99, lam=0.9, whiten=True)
    a = res.advantages
    np.testing.assert_allclose(white, (a - a.mean()) / np.sqrt(a.var(ddof=1) + 1e-8), atol=1e-12)


def test_token_gae_worked_example():
    res = token_gae([[0, 0, 1, 0], [0, 0.5, 0, 0]], [[0.2, 0.4, 0.6, 0], [0.1, 0.3, 0, 0]],
                    [[1, 1, 1, 0], [1, 1, 0, 0]], gamma=1.0, lam=1.0)
    np.testing.assert_allclose(res.advantages[0, :3], [0.8, 0.6, 0.4], atol=TOL)
    np.testing.assert_allclose(res.advantages[1, :2], [0.4, 0.2], atol=TOL)
    np.testing.assert_allclose(res.returns[0, :3], [1, 1, 1], atol=TOL)
    np.testing.assert_allclose(res.returns[1, :2], [0.5, 0.5], atol=TOL)
    np.testing.assert_allclose(res.whitened[0, :3], [1.403293, 0.526235, -0.350823], atol=TOL)
    np.testing.assert_allclose(res.whitened[1, :2], [-0.350823, -1.227881], atol=TOL)
    with pytest.raises(ValueError, match="at least 2 valid tokens"):
        token_gae([[1.0]], [[0.0]], [[1]])


def _p4_table() -> TurnTable:
    # PITFALLS P4: trajectory A has 1 step and return 1, B has 3 steps and return 0.
    rows = [("g", "A", 0, "x", "a", 1, 1, 1, "y"), ("g", "B", 0, "x", "a", 0, 0, 1, "y"),
            ("g", "B", 1, "x", "a", 0, 0, 1, "y"), ("g", "B", 2, "x", "a", 0, 0, 1, "y")]
    return make_table(rows)


@pytest.mark.parametrize("stats_over,mode,a,b", [
    ("trajectories", "mean_norm", 0.5, -0.5),
    ("steps", "mean_norm", 0.75, -0.25),
    ("trajectories", "mean_std_norm", 0.707106, -0.707106),
    ("steps", "mean_std_norm", 1.499997, -0.499999),
])
def test_pitfall_p4_episode_weighting_golden(stats_over, mode, a, b):
    out = compute_advantages(_p4_table(), "grpo", stats_over=stats_over, mode=mode)
    np.testing.assert_allclose(out, [a, b, b, b], atol=TOL)


def test_token_gae_skips_masked_tokens_inside_a_row():
    # a packed row: two valid tokens, five masked observation tokens, one valid token with the reward
    mask = [[1, 1, 0, 0, 0, 0, 0, 1]]
    rewards = [[0, 0, 0, 0, 0, 0, 0, 1.0]]
    res = token_gae(rewards, np.zeros((1, 8)), mask, gamma=0.9, lam=1.0)
    np.testing.assert_allclose(res.advantages[0], [0.81, 0.9, 0, 0, 0, 0, 0, 1.0], atol=TOL)  # not 0.9^6 over the gap
    assert np.all(res.returns[0, 2:7] == 0)
    # γ = 0: a reward on a masked token goes to the valid token before it, not lost
    res0 = token_gae([[0, 0, 0.5, 0]], np.zeros((1, 4)), [[1, 1, 0, 1]], gamma=0.0, lam=1.0)
    np.testing.assert_allclose(res0.advantages[0], [0, 0.5, 0, 0], atol=TOL)
