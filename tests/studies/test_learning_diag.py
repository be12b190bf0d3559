"""``studies/learning_diag.py`` and ``learning_cells.py``: the learning grid's diagnostics on
hand-built turns and advantages, its summary columns and every estimator's cell overrides
(pure functions, no model, no files)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "credit")]

from credit_tables import batch12  # noqa: E402

from agentrl.credit import list_estimators  # noqa: E402
from agentrl.train.checks import load_checked_config  # noqa: E402
from studies.learning_cells import NEEDS, estimator_overrides, example_kwargs  # noqa: E402
from studies.learning_diag import (  # noqa: E402
    anchor_codes, flat_group_share, group_stats, iteration_diagnostics, outcome_signs, summarise, zero_fraction)


def test_zero_fraction_counts_only_used_rows():
    adv = np.array([0.0, 1.0, 0.0, -2.0, 0.0])
    use = np.array([True, True, True, True, False])
    assert zero_fraction(adv, use) == 0.5
    assert math.isnan(zero_fraction(adv, np.zeros(5, bool)))


def test_group_stats_hand_built():
    codes = np.array([7, 7, 7, 3, 3, 9, -1, 5])
    use = np.array([True, True, True, True, True, True, True, False])  # the 5 (size 1 anyway) is unused
    g = group_stats(codes, use)
    # groups among used rows in a group: {7: 3, 3: 2, 9: 1}; rows 6 of them; the -1 row is in none
    assert g["groups"] == 3 and g["rows"] == 6
    assert g["share_ge2"] == pytest.approx(5 / 6)
    assert g["mean_size"] == pytest.approx(2.0)
    assert g["coverage"] == pytest.approx(6 / 7)
    assert group_stats(np.array([-1, -1]), np.array([True, True]))["coverage"] == 0.0


def test_flat_group_share_hand_built():
    # group 0: episodes 0 (return 1) and 1 (return 0) — contrast; group 1: episodes 2, 3 both return 0 — flat
    group = np.array([0, 0, 0, 1, 1, 1, 1])
    episode = np.array([0, 0, 1, 2, 2, 3, 3])
    reward = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert flat_group_share(group, episode, reward, np.ones(7, bool)) == pytest.approx(4 / 7)
    assert flat_group_share(group, episode, reward, np.arange(7) < 3) == 0.0


def test_anchor_groups_of_the_section12_batch():
    t = batch12()
    g = group_stats(anchor_codes(t.group, t.anchor_key), np.ones(len(t), bool))
    # A: s0 ×3, s1 ×2, s2, s3, nothing; B: u0 ×3, u1 ×3, u2 ×2, u3, u4 → 10 groups of 18 rows
    assert g["groups"] == 10 and g["rows"] == 18
    assert g["share_ge2"] == pytest.approx(13 / 18)
    assert g["mean_size"] == pytest.approx(1.8)


def test_iteration_diagnostics_gigpo_terms():
    t = batch12()
    adv = np.zeros(len(t))
    adv[:9] = 1.0
    d = iteration_diagnostics(t, adv, "gigpo", {})
    assert d["zero_frac"] == pytest.approx(0.5)
    assert d["flat_group_share"] == 0.0  # both §12 groups have a failed and a won episode
    assert d["anchor"]["share_ge2"] == pytest.approx(13 / 18)
    assert set(d["terms"]) == {"episode", "step"}
    assert d["terms"]["step"]["share_ge2"] == pytest.approx(13 / 18)  # GiGPO's step groups are the anchor groups
    assert d["terms"]["episode"]["groups"] == 2 and d["terms"]["episode"]["mean_size"] == 9.0  # turns per task group
    h = iteration_diagnostics(t, adv, "hgpo", {})["terms"]["history k=2"]
    # windows of 2 anchors: (s0,s1) and (u0,u1) twice, 8 others once; 12 of the 18 rows have a window of 2
    assert (h["groups"], h["rows"], h["coverage"]) == (10, 12, pytest.approx(2 / 3))
    assert h["share_ge2"] == pytest.approx(4 / 12)
    assert "terms" not in iteration_diagnostics(t, adv, "tree_grpo", {})  # no breakdown registered


def test_summarise_means_nested_leaves():
    got = summarise([{"zero_frac": 0.2, "anchor": {"share_ge2": 0.5}}, {"zero_frac": 0.4, "anchor": {"share_ge2": float("nan")}}])
    assert got["zero_frac"] == pytest.approx(0.3) and got["anchor"]["share_ge2"] == 0.5


def test_every_estimator_has_a_valid_cell_config(tmp_path):
    base = ROOT / "examples" / "gigpo_textworld.yaml"
    for name in list_estimators():
        cfg = load_checked_config(base, [f"run.out_dir={tmp_path}", "rollout.group_size=4", *estimator_overrides(name)])
        assert cfg.algorithm.estimator == name
        for k, v in example_kwargs(name).items():
            assert cfg.algorithm.kwargs[k] == v
    assert set(NEEDS) <= set(list_estimators())
    assert example_kwargs("grpo") == {} and example_kwargs("bipace")["tau"] == 0.05
    assert not list(tmp_path.iterdir())


def test_outcome_signs_hand_built():
    # group 0: episode 0 wins (return 1), episode 1 fails — mean 0.5; group 1: both fail (flat, not counted)
    group = np.array([0, 0, 0, 0, 0, 1, 1])
    episode = np.array([0, 0, 1, 1, 1, 2, 3])
    reward = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    adv = np.array([0.5, -0.2, 0.3, -0.4, 0.0, 0.7, -0.7])
    s = outcome_signs(group, episode, reward, adv, np.ones(7, bool))
    # failed episode 1: nonzero rows +0.3, -0.4 (the 0 is not counted) → 1/2 positive; winner: -0.2 of 2 → 1/2
    assert s == {"below_positive": 0.5, "above_negative": 0.5}
    s = outcome_signs(group, episode, reward, adv, np.array([True, False, True, True, True, True, True]))
    assert s["above_negative"] == 0.0 and s["below_positive"] == 0.5
    assert all(np.isnan(v) for v in outcome_signs(group[5:], episode[5:], reward[5:], adv[5:], np.ones(2, bool)).values())
