"""Registry, config-time validation, spec defaults, spec edge cases, layering."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from credit_tables import batch12, make_table

from agentrl.credit import (
    compute_advantages,
    estimator_params,
    register_estimator,
    turn_gae_returns,
    validate_estimator_kwargs,
)
from agentrl.types import TurnTable

EPS = 1e-6


def test_unknown_estimator_lists_names_and_suggests():
    with pytest.raises(KeyError, match=r"did you mean 'gigpo'.*Known: .*graphgpo"):
        validate_estimator_kwargs("gigp", {})


def test_unknown_parameter_lists_valid_parameters():
    with pytest.raises(TypeError, match=r"'step_advantage_weight' \(did you mean 'step_advantage_w'\?\).*gamma=0\.95"):
        validate_estimator_kwargs("gigpo", {"step_advantage_weight": 1.0})
    with pytest.raises(TypeError, match="has no parameter"):
        compute_advantages(batch12(), "grpo", gamma=0.9)


def test_bad_values_fail_at_validation():
    with pytest.raises(ValueError, match=r"mode='std'.*mean_std_norm"):
        validate_estimator_kwargs("gigpo", {"mode": "std"})
    with pytest.raises(ValueError, match="stats_over"):
        validate_estimator_kwargs("grpo", {"stats_over": "per_turn"})
    with pytest.raises(TypeError, match="gamma"):
        validate_estimator_kwargs("gigpo", {"gamma": "0.9"})
    with pytest.raises(TypeError, match="history_length"):
        validate_estimator_kwargs("hgpo", {"history_length": 2.5})
    validate_estimator_kwargs("gigpo", {"gamma": 1})  # an int is a fine float
    with pytest.raises(TypeError, match="base_group"):
        validate_estimator_kwargs("hgpo", {"base_group": 1})
    full = validate_estimator_kwargs("hgpo", {"history_length": 4})
    assert full["history_length"] == 4 and full["length_weight_alpha"] == 1.0


def test_spec_defaults():
    assert estimator_params("grpo") == {"mode": "mean_std_norm", "stats_over": "steps", "c_inv": 0.1, "eps": EPS}
    g = estimator_params("gigpo")
    assert (g["gamma"], g["step_advantage_w"], g["mode"], g["c_inv"], g["enable_similarity"], g["similarity_thresh"]) == (
        0.95, 1.0, "mean_std_norm", 0.1, False, 0.95)
    h = estimator_params("hgpo")
    assert (h["history_length"], h["length_weight_alpha"], h["base_group"], h["gamma"]) == (2, 1.0, False, 0.95)
    g2 = estimator_params("g2po")
    assert (g2["beta"], g2["success_reward"], g2["sibling_invalid_penalty"]) == (0.95, 10.0, 0.1)
    gg = estimator_params("graphgpo")
    assert (gg["gamma"], gg["episode_advantage_w"], gg["normalize_distance"]) == (0.1, 1.0, False)
    b = estimator_params("bipace")
    assert (b["gamma"], b["tau"], b["merge_identical_anchor"], b["step_advantage_w"]) == (0.95, 0.05, True, 1.0)
    assert estimator_params("rtpo") == {"gamma": 1.0, "mode": "mean_std_norm", "eps": EPS}
    t = estimator_params("turn_ppo")
    assert (t["gamma"], t["lam"], t["whiten"]) == (0.99, 0.9, False)


def test_register_rejects_bad_signatures_and_duplicates():
    with pytest.raises(TypeError, match="keyword-only"):
        register_estimator("bad_sig")(lambda table, gamma=0.9: np.zeros(len(table)))
    with pytest.raises(TypeError, match="keyword-only with a default"):
        def needs_value(table, *, gamma):  # noqa: ANN001
            return np.zeros(len(table))
        register_estimator("bad_default")(needs_value)
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda table: np.zeros(len(table)))


def test_missing_required_column_is_named():
    tb = batch12()
    no_hidden = TurnTable(**{**tb.__dict__, "hidden": None})
    with pytest.raises(ValueError, match="hidden"):
        compute_advantages(no_hidden, "bipace")
    with pytest.raises(ValueError, match="value"):
        compute_advantages(tb, "turn_ppo")
    with pytest.raises(ValueError, match="branch"):
        compute_advantages(tb, "rtpo")


def test_duplicate_episode_step_is_rejected():
    tb = batch12()
    bad = TurnTable(**{**tb.__dict__, "t": np.where(np.arange(18) == 1, 0, tb.t)})
    with pytest.raises(ValueError, match="episode=.*t=0"):
        compute_advantages(bad, "gigpo")


def test_grpo_trajectories_hazard_is_the_reference_formula():
    # §2.4: t = 0 scores tie but a later row carries its own invalid penalty → −0.1/eps
    rows = [("g", "a", 0, "s", "x", 0, 0, 1, "s"), ("g", "a", 1, "s", "x", 0, 1, 0, "s"),
            ("g", "b", 0, "s", "x", 0, 1, 1, "s")]
    out = compute_advantages(make_table(rows), "grpo", stats_over="trajectories")
    np.testing.assert_allclose(out, [0.0, -0.1 / EPS, 0.0], rtol=1e-12)


def test_graphgpo_without_success_uses_distance_one():
    # §6.5: no success in a group → every d = 1, G = 10γ; only invalid actions differ
    rows = [("g", "a", 0, "s0", "x", 0, 0, 1, "s1"), ("g", "a", 1, "s1", "x", 0, 0, 0, "s2"),
            ("g", "b", 0, "s0", "y", 0, 0, 1, "s3"), ("g", "b", 1, "s1", "y", 0, 0, 1, "s0")]
    out = compute_advantages(make_table(rows), "graphgpo", episode_advantage_w=0.0)
    # group s1: G = [1 − 0.1, 1], mean 0.95, std 0.05·√2 → ∓0.05/(0.0707107 + eps); s0 ties → 0
    a = 0.05 / (0.05 * np.sqrt(2) + EPS)
    np.testing.assert_allclose(out, [0, -a, 0, a], atol=1e-12)


def test_graphgpo_literal_success_observation_is_the_goal():
    # §6.5: the string "success" is reserved — a real observation with that text is the goal
    rows = [("g", "a", 0, "s0", "x", 0, 0, 1, "success"), ("g", "b", 0, "s0", "y", 0, 0, 1, "s1"),
            ("g", "b", 1, "s1", "y", 0, 0, 1, "s2")]
    out = compute_advantages(make_table(rows), "graphgpo", episode_advantage_w=0.0, mode="mean_norm")
    # d(success) = 0 → G = 10; d(s1) = D_max + 1 = 2 (s0 has d = 1) → G = 0.1; s1 is a singleton
    np.testing.assert_allclose(out, [4.95, -4.95, 0.0], atol=1e-12)


def test_gigpo_similarity_merges_close_anchors():
    rows = [("g", "a", 0, "You see a red apple.", "x", 10, 1, 1, "z"),
            ("g", "b", 0, "You see a red apple!", "x", 0, 1, 1, "z")]
    exact = compute_advantages(make_table(rows), "gigpo", mode="mean_norm")
    fuzzy = compute_advantages(make_table(rows), "gigpo", mode="mean_norm", enable_similarity=True)
    np.testing.assert_allclose(exact, [5.0, -5.0])           # episode term only
    np.testing.assert_allclose(fuzzy, [10.0, -10.0])         # + step term 5 / −5
    with pytest.raises(ValueError, match="similarity_thresh"):
        compute_advantages(make_table(rows), "gigpo", enable_similarity=True, similarity_thresh=1.0)


def test_turn_ppo_single_turn_and_truncation_edge_cases():
    tb = TurnTable(group=[0, 0], episode=[0, 1], t=[0, 0], reward=[1.0, 0.0], terminated=[True, False],
                   truncated=[False, True], action_valid=[True, True], anchor_key=[0, 0], next_anchor_key=[0, 0],
                   action_key=[0, 0], parent=[-1, -1], episode_ok=[True, True], trainable=[True, True],
                   turn_id=[0, 1], value=[0.25, 0.5], bootstrap_value=[99.0, 2.0])
    res = turn_gae_returns(tb, gamma=0.5, lam=1.0)
    # terminal: A = r − V, no bootstrap; truncated: A = r + γ·V_boot − V
    np.testing.assert_allclose(res.advantages, [0.75, 0.5])


def test_credit_imports_no_torch():
    code = "import sys, agentrl.credit; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _fork_table() -> TurnTable:
    """r → t1 → {a: reward 1, b: reward 0}: turn t1 (row 1) has two children (rows 2 and 3)."""
    n = 4
    return TurnTable(group=[0] * n, episode=[0, 0, 0, 1], t=[0, 1, 2, 2], reward=[0.0, 0.0, 1.0, 0.0],
                     terminated=[False, False, True, True], truncated=[False] * n, action_valid=[True] * n,
                     anchor_key=[0, 1, 2, 2], next_anchor_key=[1, 2, 3, 3], action_key=[0, 1, 2, 3],
                     parent=[-1, 0, 1, 1], episode_ok=[True] * n, trainable=[True] * n, turn_id=list(range(n)),
                     tree=[0] * n)


def test_chain_estimators_refuse_a_tree_and_tree_estimators_take_it():
    from agentrl.credit import get_estimator, list_estimators
    from agentrl.credit.registry import is_branching, tree_estimators

    tb = _fork_table()
    assert is_branching(tb) and not is_branching(batch12())
    assert tree_estimators() == ["rtpo", "tree_grpo"]
    for name in list_estimators():
        if not get_estimator(name).accepts_trees and not get_estimator(name).requires:
            with pytest.raises(ValueError, match="scores chains, but the table branches"):
                compute_advantages(tb, name)
    adv = compute_advantages(tb, "tree_grpo")
    assert adv.shape == (4,) and adv[2] > adv[3]  # the winning branch beats the losing one


def test_config_refuses_a_chain_estimator_with_a_tree_sampler():
    from agentrl.config import ConfigError
    from agentrl.train.checks import checked_config_from_dict

    raw = {"env": {"id": "agentrl/Toy-v0"}, "rollout": {"sampler": "tree"}, "algorithm": {"estimator": "gigpo"}}
    with pytest.raises(ConfigError, match="stores trees, but algorithm.estimator 'gigpo' scores chains"):
        checked_config_from_dict(raw)
    ok = checked_config_from_dict({**raw, "algorithm": {"estimator": "tree_grpo"}})
    assert ok.algorithm.estimator == "tree_grpo"
