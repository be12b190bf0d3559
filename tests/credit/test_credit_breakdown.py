"""The estimators' own breakdowns (agentrl.credit.breakdown): the terms add up to the advantage
(within 1e-12 on the ALGORITHMS.md §12 batch and random tables), each term's statistics explain
its value, and estimators without one say so."""

from __future__ import annotations

import numpy as np
import pytest
from credit_tables import batch12, random_table

from agentrl.credit import (breakdown_estimators, compute_advantages, explain_advantages, has_breakdown,
                            register_estimator)
from agentrl.credit.breakdown import FORMULAS

WITH = ["beacon", "bipace", "dr_grpo", "g2po", "gigpo", "graphgpo", "grpo", "grpo_mean", "hgpo"]
WITH += ["threespo"]
WITH = sorted(WITH + ["oprl", "stepopsd"])
#: non-default hyperparameters that switch on every branch of the breakdowns
VARIANTS = {
    "grpo": [{"mode": "mean_norm"}, {"stats_over": "trajectories"}],
    "grpo_mean": [{"stats_over": "episodes"}],
    "dr_grpo": [{}],
    "gigpo": [{"step_advantage_w": 0.5, "gamma": 0.9}, {"stats_over": "trajectories", "mode": "mean_norm"},
              {"enable_similarity": True, "similarity_thresh": 0.6}],
    "hgpo": [{"base_group": True}, {"history_length": 0, "length_weight_alpha": 0.0}, {"mode": "mean_norm",
                                                                                       "base_group": True}],
    "g2po": [{"step_advantage_w": 0.3, "mode": "mean_norm"}, {"stats_over": "trajectories"}],
    "graphgpo": [{"normalize_distance": True}, {"episode_advantage_w": 0.0}, {"episode_advantage_w": 0.4,
                                                                               "step_advantage_w": 2.0}],
    "bipace": [{"tau": 0.3, "merge_identical_anchor": False}, {"mode": "mean_norm"}],
    "beacon": [{"mode": "mean_std_norm", "step_advantage_w": 1.0}, {"stats_over": "trajectories"}],
    "threespo": [{"episode_advantage_w": 0.5, "mode": "mean_std_norm"}, {"alpha": 1.0, "c_inv": 0.0}],
    "oprl": [{"mode": "mean_norm", "step_advantage_w": 0.5}, {"mode": "rloo"}, {"process_only": True, "mode": "rloo"},
             {"stats_over": "trajectories", "batch_scale": False, "beta": 0.3}, {"process_only": True}],
    "stepopsd": [{"lambda_mix": 1.0, "alpha_clip": 0.5}, {"lambda_mix": 0.0}, {"mode": "mean_norm",
                                                                                "stats_over": "episodes"}],
}


def test_breakdown_estimators_are_the_listed_ones():
    assert breakdown_estimators() == WITH
    assert not has_breakdown("tree_grpo") and not has_breakdown("rtpo") and not has_breakdown("turn_ppo")
    with pytest.raises(LookupError, match="has no breakdown.*gigpo"):
        explain_advantages(batch12(), "turn_ppo")


def _check(tb, name, kw):
    b = explain_advantages(tb, name, **kw)
    adv = compute_advantages(tb, name, **kw)
    np.testing.assert_allclose(b.total(), adv, atol=1e-12, rtol=0)
    assert b.estimator == name and b.terms
    for t in b.terms:
        for arr in (t.value, t.weight, t.x, t.mean, t.std):
            assert arr.shape == (len(tb),) and arr.dtype == np.float64
        assert t.group.dtype == np.int64 and t.size.dtype == np.int64
        used = np.isfinite(t.mean)
        assert np.all(t.size[used] >= 1) and np.all(t.group[used] >= 0)
        d = t.x[used] - t.mean[used]
        expect = d / (t.std[used] + b.eps) if t.formula == FORMULAS["mean_std_norm"] else d
        np.testing.assert_allclose(t.value[used], expect, atol=1e-9, rtol=1e-9)  # the stats explain the value
        gn = t.formula in FORMULAS.values()  # StepOPSD's shaping term A·(W − 1) is no group normaliser
        if gn and (t.name != "step" or name != "bipace"):  # PACE's value is Q(C,a) − V(C): 0 also with stats
            assert np.all(t.value[~used] == 0.0), (name, t.name)
        members = t.group[used]
        for g in np.unique(members):  # one group, one set of statistics
            rows = used & (t.group == g)
            assert np.unique(t.mean[rows]).size == 1 and np.unique(t.size[rows]).size == 1
    return b


@pytest.mark.parametrize("name", WITH)
def test_terms_add_up_to_the_advantage(name):
    for kw in [{}] + VARIANTS[name]:
        _check(batch12(), name, kw)
        for seed in range(12):
            _check(random_table(np.random.default_rng(seed)), name, kw)


def test_gigpo_terms_on_the_worked_example():
    b = _check(batch12(), "gigpo", {})
    ep, step = b.terms
    assert (ep.name, step.name) == ("episode", "step")
    # §12: group A has 8 rows (3 episodes), its s0 anchor group 3 occurrences
    assert ep.size[0] == 8 and step.size[0] == 3 and step.size[2] == 1 and np.isnan(step.mean[2])
    assert step.value[2] == 0.0  # a singleton state gives no step term
    np.testing.assert_array_equal(b.extras["return R"][2], 10.0)


def test_hgpo_weights_are_the_normalised_length_weights():
    b = _check(batch12(), "hgpo", {"base_group": True})
    assert [t.name for t in b.terms] == ["episode", "history k=1", "history k=2", "history k=3"]
    w = np.stack([t.weight for t in b.terms])
    kept = w > 0
    assert np.all((w.sum(0) < 1) | ~kept.any(0))  # Σ w_k / (Σ w_k + eps) < 1


def test_breakdown_must_take_the_estimators_keywords():
    def fn(table, *, alpha=1.0):
        return np.zeros(len(table))

    with pytest.raises(TypeError, match="breakdown takes"):
        register_estimator("test_bad_breakdown", breakdown=lambda table, *, beta: None)(fn)
