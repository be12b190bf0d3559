"""Vectorised estimators == the slow reference loops (credit_reference.py) on random tables."""

from __future__ import annotations

import numpy as np
import pytest
from credit_reference import REFERENCE, rtpo_update_order as ref_update_order
from credit_tables import random_rtpo_table, random_table, random_tree_table

from agentrl.credit import compute_advantages, rtpo_update_order

N_FAST, N_SLOW = 10, 200

CONFIGS = [
    ("grpo", {}),
    ("grpo", {"stats_over": "trajectories"}),
    ("grpo", {"mode": "mean_norm", "c_inv": 0.0}),
    ("grpo_mean", {}),
    ("dr_grpo", {"stats_over": "trajectories"}),
    ("gigpo", {}),
    ("gigpo", {"mode": "mean_norm", "gamma": 0.9, "step_advantage_w": 0.5}),
    ("gigpo", {"enable_similarity": True, "similarity_thresh": 0.7}),
    ("hgpo", {}),
    ("hgpo", {"history_length": 0, "mode": "mean_norm"}),
    ("hgpo", {"history_length": 4, "length_weight_alpha": 0.0, "base_group": True}),
    ("g2po", {}),
    ("g2po", {"mode": "mean_norm", "success_reward": 1.0}),
    ("graphgpo", {}),
    ("graphgpo", {"normalize_distance": True, "gamma": 0.2, "mode": "mean_norm"}),
    ("graphgpo", {"episode_advantage_w": 0.0}),
    ("bipace", {}),
    ("bipace", {"tau": 0.3, "merge_identical_anchor": False, "mode": "mean_norm"}),
    # §1.5 stats_over on the episode term of every estimator that has one (issue 19 item 10)
    ("gigpo", {"stats_over": "trajectories"}),
    ("hgpo", {"base_group": True, "stats_over": "episodes"}),
    ("g2po", {"stats_over": "trajectories"}),
    ("graphgpo", {"stats_over": "episodes"}),
    ("bipace", {"stats_over": "trajectories"}),
    ("beacon", {}),
    ("beacon", {"milestone_gamma": 0.95, "step_advantage_w": 1.0, "mode": "mean_std_norm", "c_inv": 1.0}),
    ("beacon", {"stats_over": "trajectories", "milestone_reward": 1.0}),
    ("turn_ppo", {}),
    ("turn_ppo", {"gamma": 0.9, "lam": 0.5, "whiten": True, "c_inv": 1.2}),
    ("threespo", {}),
    ("threespo", {"alpha": 1.0, "mode": "mean_std_norm", "xi": 3.0, "zeta": 0.3, "omega_k": 0.5}),
    ("threespo", {"episode_advantage_w": 0.5, "c_inv": 0.0}),
    ("hiper", {}),
    ("hiper", {"bootstrap_truncated": False, "norm_adv": False, "keep_penalty_mode": "fixed", "gamma": 0.9,
               "lam_turn": 0.7, "lam_seg": 0.5, "keep_consistency_requires_both": False}),
    ("hiper", {"use_term": False, "bootstrap": "next_state", "keep_penalty": -3.5, "c_inv": 0.0}),
    ("oprl", {}),
    ("oprl", {"mode": "mean_norm", "step_advantage_w": 0.4, "batch_scale": False, "beta": 0.3}),
    ("oprl", {"mode": "rloo"}),
    ("oprl", {"mode": "rloo", "process_only": True, "c_inv": 0.0}),
    ("oprl", {"stats_over": "trajectories", "process_only": True}),
    ("stepopsd", {}),
    ("stepopsd", {"lambda_mix": 1.0, "alpha_clip": 0.5, "mode": "mean_norm"}),
    ("stepopsd", {"lambda_mix": 0.7, "alpha_clip": 1.0, "stats_over": "trajectories", "granularity": "token"}),
]


def _table(name: str, rng: np.random.Generator):
    if name == "tree_grpo":
        return random_tree_table(rng, with_tree=bool(rng.random() < 0.5))
    if name == "rtpo":
        return random_rtpo_table(rng)
    return random_table(rng)


def _check(name: str, kwargs: dict, seeds: range) -> None:
    ref = REFERENCE[name]
    for seed in seeds:
        tb = _table(name, np.random.default_rng(seed))
        if name == "turn_ppo" and kwargs.get("whiten") and (tb.episode_ok & tb.trainable).sum() < 2:
            continue
        got = compute_advantages(tb, name, **kwargs)
        want = np.asarray(ref(tb, **kwargs), dtype=np.float64)
        np.testing.assert_allclose(got, want, atol=1e-9, rtol=1e-9, err_msg=f"{name} {kwargs} seed={seed}")


ALL = CONFIGS + [("tree_grpo", {}), ("tree_grpo", {"node_weight": "mean"}), ("rtpo", {}),
                 ("rtpo", {"gamma": 0.95, "mode": "mean_norm"})]


@pytest.mark.parametrize("name,kwargs", ALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ALL)])
def test_matches_reference_sample(name, kwargs):
    _check(name, kwargs, range(N_FAST))


@pytest.mark.slow
@pytest.mark.parametrize("name,kwargs", ALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ALL)])
def test_matches_reference_200_tables(name, kwargs):
    _check(name, kwargs, range(1000, 1000 + N_SLOW))


def test_rtpo_update_order_matches_reference():
    for seed in range(50):
        tb = random_rtpo_table(np.random.default_rng(seed))
        assert rtpo_update_order(tb).tolist() == ref_update_order(tb)
